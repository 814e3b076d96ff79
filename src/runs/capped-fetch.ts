/**
 * The Messages API's replies a run reads, bounded: the SDK reads a reply whole before it
 * parses it, so an endpoint (ANTHROPIC_BASE_URL: a proxy, a gateway, or whoever answers for
 * it) that sends without end would grow the orchestrator's memory, and with it end every
 * tenant's sessions. A reply of the loop's max_tokens is a few hundred KiB at most.
 */
export const MAX_MODEL_REPLY_BYTES = 16 * 1024 * 1024;

/** A `fetch` whose responses error once their body passes maxBytes (its declared length is refused at once). */
export function cappedFetch(maxBytes: number, base: typeof fetch = globalThis.fetch): typeof fetch {
  const tooLarge = () => new Error(`the model API's reply is larger than ${maxBytes} bytes: the run reads no more of it`);
  return async (input, init) => {
    const response = await base(input, init);
    if (!response.body) return response;
    const declared = Number(response.headers.get('content-length') ?? Number.NaN);
    if (declared > maxBytes) {
      await response.body.cancel();
      throw tooLarge();
    }
    let seen = 0;
    // An errored transform cancels the body's source: the connection's bytes stop being read.
    const counted = response.body.pipeThrough(
      new TransformStream<Uint8Array, Uint8Array>({
        transform(chunk, controller) {
          seen += chunk.byteLength;
          if (seen > maxBytes) controller.error(tooLarge());
          else controller.enqueue(chunk);
        },
      }),
    );
    return new Response(counted, { status: response.status, statusText: response.statusText, headers: response.headers });
  };
}
