import type { BetaMessageParam } from '@anthropic-ai/sdk/resources/beta/messages/messages';

/** What an image dropped from the history becomes: the model still sees that one was there. */
export const DROPPED_IMAGE_TEXT = '[older screenshot omitted]';

/**
 * Keeps only the `keep` most recent images of tool results in the history, replacing older
 * ones with a short text (as the reference loop's _maybe_filter_to_n_most_recent_images
 * does: screenshots are most of a request's tokens, and old ones say little). In place.
 */
export function keepRecentImages(messages: BetaMessageParam[], keep: number): void {
  let seen = 0;
  for (let m = messages.length - 1; m >= 0; m--) {
    const content = messages[m]?.content;
    if (!Array.isArray(content)) continue;
    for (let b = content.length - 1; b >= 0; b--) {
      const block = content[b];
      if (block?.type !== 'tool_result' || !Array.isArray(block.content)) continue;
      for (let i = block.content.length - 1; i >= 0; i--) {
        if (block.content[i]?.type !== 'image') continue;
        seen++;
        if (seen > keep) block.content[i] = { type: 'text', text: DROPPED_IMAGE_TEXT };
      }
    }
  }
}

/**
 * Prompt caching as the reference loop does it: a cache breakpoint on the last block of the
 * most recent user turn (the history up to it is then read from the cache next time), and
 * none left on earlier turns (the API allows four breakpoints). In place.
 */
export function markCacheBreakpoint(messages: BetaMessageParam[]): void {
  let marked = false;
  for (let m = messages.length - 1; m >= 0; m--) {
    const message = messages[m];
    if (message?.role !== 'user' || !Array.isArray(message.content)) continue;
    const last = message.content[message.content.length - 1];
    if (!last || !('cache_control' in last || last.type === 'text' || last.type === 'tool_result')) continue;
    const block = last as { cache_control?: { type: 'ephemeral' } | null };
    if (!marked) {
      block.cache_control = { type: 'ephemeral' };
      marked = true;
    } else if (block.cache_control) {
      delete block.cache_control;
    }
  }
}
