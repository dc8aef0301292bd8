/** Starting a real gateway for end-to-end tests: port 0, silent logs, fast simulated ranks, an `openai` client. */
import OpenAI from 'openai';
import { pino } from 'pino';
import { startGateway, type GatewayOptions, type RunningGateway } from '../../src/gateway/index.js';

/**
 * `startGateway` with test defaults: any free port, a silent logger, model id `sim`, and simulated ranks that run at
 * time scale 0 with warn-level logs (without `groups`). `opts` overrides any default.
 */
export function startSimGateway(opts: GatewayOptions = {}): Promise<RunningGateway> {
  return startGateway({
    // Per group with `groups` (startGateway refuses single-group options beside them).
    ...(opts.groups === undefined ? { simArgs: ['--time-scale', '0', '--log-level', 'warn'] } : {}),
    port: 0,
    logger: pino({ level: 'silent' }),
    modelId: 'sim',
    ...opts,
  });
}

/** An `openai` client for `gateway`: no retries, a 60 s request bound. */
export function openaiClient(gateway: { url: string }): OpenAI {
  return new OpenAI({ baseURL: `${gateway.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60_000 });
}

/** What a streamed chat completion carried: the concatenated delta text, the last finish reason, the usage chunk. */
export interface StreamedChat {
  /** Concatenated `choices[].delta.content`. */
  text: string;
  /** The last non-null `finish_reason` (`stop`, `length`, ...), or null when none arrived. */
  finish: string | null;
  /** The usage of the final chunk (`stream_options.include_usage`), or null when none arrived. */
  usage: OpenAI.CompletionUsage | null;
}

/**
 * Stream one chat completion of a single user message `content` for `model` with `max_tokens: maxTokens` (tokens)
 * and `stream_options.include_usage`, and collect it. Throws what the `openai` client throws (HTTP or stream errors).
 */
export async function streamChatWithUsage(
  client: OpenAI,
  model: string,
  content: string,
  maxTokens: number,
): Promise<StreamedChat> {
  const stream = await client.chat.completions.create({
    model,
    messages: [{ role: 'user', content }],
    max_tokens: maxTokens,
    stream: true,
    stream_options: { include_usage: true },
  });
  const out: StreamedChat = { text: '', finish: null, usage: null };
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      out.text += c.delta.content ?? '';
      if (c.finish_reason) out.finish = c.finish_reason;
    }
    if (chunk.usage) out.usage = chunk.usage;
  }
  return out;
}

/**
 * Stream one `/v1/completions` request of `prompt` for `model` with `max_tokens: maxTokens` (tokens), pinned to DP rank
 * `dpRank` with the `X-data-parallel-rank` header (gateway.md 14), and collect `choices[0]`: the concatenated text and
 * the last finish reason (null when none arrived). Throws what the `openai` client throws.
 */
export async function streamPinnedCompletion(
  client: OpenAI,
  model: string,
  prompt: string,
  maxTokens: number,
  dpRank: number,
): Promise<{ text: string; finish: string | null }> {
  const stream = await client.completions.create(
    { model, prompt, max_tokens: maxTokens, stream: true },
    { headers: { 'X-data-parallel-rank': String(dpRank) } },
  );
  let text = '';
  let finish: string | null = null;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.text ?? '';
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  return { text, finish };
}
