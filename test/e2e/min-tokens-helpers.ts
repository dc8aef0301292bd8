/**
 * The end-to-end `min_tokens` check (issue #14; vLLM's frontend rule, v1 detokenizer.py PR #22014): stop strings do
 * not apply to the text of the first `min_tokens` tokens, for streamed and non-streamed requests alike. Shared by
 * the TokenSpeed (api-stream-equivalence) and vLLM (vllm-short-ready) e2e files, each with its own gateway.
 *
 * How the expected text is known without a tokenizer in the test: every request sets `ignore_eos`, so a simulated
 * rank's token stream for a (prompt, seed) never depends on the limits (it may never stop on EOS, so it always draws
 * the same tokens); `max_tokens: k` then returns the text of the first k tokens. The stop strings are taken from that
 * text (the 2nd token's text, and the first two tokens' text), so without `min_tokens` they match at token 2.
 */
import assert from 'node:assert/strict';
import { parseSse } from '../server/helpers.js';

/** One completion's text, finish reason and completion token count. */
interface Outcome {
  text: string;
  finish: string;
  completionTokens: number | null;
}

async function complete(url: string, body: Record<string, unknown>): Promise<Outcome> {
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body.stream === true ? { ...body, stream_options: { include_usage: true } } : body),
  });
  const raw = await res.text();
  assert.equal(res.status, 200, raw);
  if (body.stream !== true) {
    const json = JSON.parse(raw) as {
      choices: Array<{ text: string; finish_reason: string }>;
      usage: { completion_tokens: number };
    };
    return {
      text: json.choices[0]!.text,
      finish: json.choices[0]!.finish_reason,
      completionTokens: json.usage.completion_tokens,
    };
  }
  const { events, doneCount } = parseSse(raw);
  assert.equal(doneCount, 1);
  const out: Outcome = { text: '', finish: '', completionTokens: null };
  for (const ev of events as Array<{
    choices: Array<{ text?: string; finish_reason: string | null }>;
    usage?: { completion_tokens: number } | null;
  }>) {
    for (const c of ev.choices) {
      out.text += c.text ?? '';
      if (c.finish_reason !== null) out.finish = c.finish_reason;
    }
    if (ev.usage) out.completionTokens = ev.usage.completion_tokens;
  }
  return out;
}

/** `text` cut at the first occurrence of a stop string that ends after `boundary` characters (vLLM's rule). */
function cutAfter(text: string, stops: readonly string[], boundary: number): string {
  let cut = text.length;
  for (const s of stops) {
    const at = text.indexOf(s, Math.max(0, boundary - s.length + 1));
    if (at >= 0 && at < cut) cut = at;
  }
  return text.slice(0, cut);
}

/**
 * For each prompt and seed: learn the first 1, 2, 3 and `maxTokens` tokens' text, then request with stop strings
 * matching at token 2 and `min_tokens` 0 and 3, streamed and not, and check text, finish reason and token count.
 * Returns the number of checked requests. Throws an AssertionError naming the case.
 */
export async function checkMinTokensStops(
  url: string,
  model: string,
  cases: { prompts: readonly string[]; seeds: readonly number[]; maxTokens?: number },
): Promise<number> {
  const maxTokens = cases.maxTokens ?? 30;
  let checked = 0;
  for (const prompt of cases.prompts) {
    for (const seed of cases.seeds) {
      const base = { model, prompt, seed, ignore_eos: true };
      const first = async (k: number) => (await complete(url, { ...base, max_tokens: k })).text;
      const [t1, t2, t3, all] = [await first(1), await first(2), await first(3), await first(maxTokens)];
      assert.ok(
        all.startsWith(t3) && t3.startsWith(t2) && t2.startsWith(t1),
        `prefixes of one token stream: ${JSON.stringify([t1, t2, t3])}`,
      );
      const second = t2.slice(t1.length);
      assert.ok(second.length > 0 && t1.length > 0, `tokens 1 and 2 have text: ${JSON.stringify([t1, t2])}`);
      for (const stop of [[second], [t2]]) {
        for (const minTokens of [0, 3]) {
          const expected = cutAfter(all, stop, minTokens === 0 ? 0 : t3.length);
          for (const stream of [false, true]) {
            const what = `prompt ${JSON.stringify(prompt)} seed ${seed} stop ${JSON.stringify(stop)} min_tokens ${minTokens} stream ${stream}`;
            const got = await complete(url, { ...base, max_tokens: maxTokens, stop, min_tokens: minTokens, stream });
            assert.equal(got.text, expected, what);
            assert.equal(got.finish, expected.length < all.length ? 'stop' : 'length', what);
            if (minTokens === 0) assert.ok(expected.length < t2.length, `${what}: stops by token 2 without min_tokens`);
            else {
              assert.ok(
                got.text.startsWith(t2),
                `${what}: the stop text inside the first 3 tokens is emitted as ordinary text`,
              );
              assert.ok(
                (got.completionTokens ?? 0) >= 3,
                `${what}: at least min_tokens tokens (${got.completionTokens})`,
              );
            }
            checked++;
          }
        }
      }
    }
  }
  return checked;
}
