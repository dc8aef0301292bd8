/**
 * Incremental reading of an OpenAI-style SSE stream from a fetch body (gateway.md 12: `data: <json>` records separated
 * by a blank line, `{error: {...}}` for a mid-stream error, `data: [DONE]` last), as the end-to-end tests need it:
 * records are yielded as they arrive, so a test can watch a stream that is still open.
 */

/** One record of a completion stream: `[DONE]`, or a chunk's `choices[0]` text and finish reason and its error event. */
export type CompletionSseItem =
  | { done: true }
  | {
      done: false;
      /** `choices[0].text` ('' when absent). */
      text: string;
      /** `choices[0].finish_reason`, or null when absent or null. */
      finishReason: string | null;
      /** The `{error: {message, type, code}}` of a mid-stream error event, or null. */
      error: { message: string; type: string; code: string | null } | null;
    };

/**
 * Yield every `data:` record of the SSE `body` as it completes (records that are not `data:` lines are skipped).
 * Throws what reading `body` throws (e.g. an AbortError once the fetch is aborted) and a SyntaxError on a record that
 * is not JSON.
 */
export async function* completionSse(body: AsyncIterable<Uint8Array>): AsyncGenerator<CompletionSseItem> {
  const decoder = new TextDecoder();
  let buffered = '';
  for await (const chunk of body) {
    buffered += decoder.decode(chunk, { stream: true });
    let cut: number;
    while ((cut = buffered.indexOf('\n\n')) >= 0) {
      const record = buffered.slice(0, cut);
      buffered = buffered.slice(cut + 2);
      if (!record.startsWith('data: ')) continue;
      const data = record.slice('data: '.length);
      if (data === '[DONE]') {
        yield { done: true };
        continue;
      }
      const parsed = JSON.parse(data) as {
        choices?: { text?: string; finish_reason?: string | null }[];
        error?: { message: string; type: string; code: string | null };
      };
      const choice = parsed.choices?.[0];
      yield {
        done: false,
        text: choice?.text ?? '',
        finishReason: choice?.finish_reason ?? null,
        error: parsed.error
          ? { message: parsed.error.message, type: parsed.error.type, code: parsed.error.code }
          : null,
      };
    }
  }
}
