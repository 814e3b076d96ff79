/** One Server-Sent Event: its `event:` name (`message` when it has none) and its `data:` lines joined. */
export interface ServerSentEvent {
  event: string;
  data: string;
}

/** The events of a text/event-stream response body, as they arrive (the screen stream, a run's events). */
export async function* serverSentEvents(body: ReadableStream<Uint8Array> | null): AsyncGenerator<ServerSentEvent> {
  if (!body) return;
  const decoder = new TextDecoder();
  let buffered = '';
  for await (const chunk of body as unknown as AsyncIterable<Uint8Array>) {
    buffered += decoder.decode(chunk, { stream: true });
    for (let cut = buffered.indexOf('\n\n'); cut >= 0; cut = buffered.indexOf('\n\n')) {
      const lines = buffered.slice(0, cut).split('\n');
      buffered = buffered.slice(cut + 2);
      const event = lines.find((line) => line.startsWith('event: '))?.slice(7) ?? 'message';
      const data = lines
        .filter((line) => line.startsWith('data: '))
        .map((line) => line.slice(6))
        .join('\n');
      yield { event, data };
    }
  }
}
