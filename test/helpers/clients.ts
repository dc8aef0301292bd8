/**
 * The third-party OpenAI clients the end-to-end tests drive against a running gateway, each configured the way its
 * documentation says to point it at an OpenAI-compatible server: the `openai` SDK, LangChain JS (`ChatOpenAI` from
 * @langchain/openai) and the Vercel AI SDK (`ai` with @ai-sdk/openai-compatible). No retries, so a refusal shows at
 * once. Each returns what a user of that client reads: the reply text.
 */
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { ChatOpenAI } from '@langchain/openai';
import { generateText, streamText } from 'ai';
import OpenAI from 'openai';

/** One chat turn as the tests ask it: a single user message, a token limit and a seed (the sim is seeded by it). */
export interface ChatAsk {
  model: string;
  content: string;
  maxTokens: number;
  seed: number;
}

/** A client's view of one chat turn: the text, non-streamed and streamed. */
export interface ChatClient {
  name: string;
  chat(ask: ChatAsk): Promise<string>;
  streamChat(ask: ChatAsk): Promise<string>;
}

/** The `openai` SDK against `baseUrl` (the gateway's `http://host:port`) with `apiKey`. */
export function openaiSdkClient(baseUrl: string, apiKey: string): ChatClient {
  const client = new OpenAI({ baseURL: `${baseUrl}/v1`, apiKey, maxRetries: 0, timeout: 60_000 });
  const params = (a: ChatAsk) => ({
    model: a.model,
    messages: [{ role: 'user' as const, content: a.content }],
    max_tokens: a.maxTokens,
    seed: a.seed,
  });
  return {
    name: 'openai SDK',
    async chat(a) {
      const res = await client.chat.completions.create(params(a));
      return res.choices[0]?.message.content ?? '';
    },
    async streamChat(a) {
      let text = '';
      for await (const chunk of await client.chat.completions.create({ ...params(a), stream: true }))
        text += chunk.choices[0]?.delta.content ?? '';
      return text;
    },
  };
}

/** LangChain JS `ChatOpenAI` against `baseUrl` with `apiKey`. */
export function langchainClient(baseUrl: string, apiKey: string): ChatClient {
  const model = (a: ChatAsk) =>
    new ChatOpenAI({
      model: a.model,
      apiKey,
      maxTokens: a.maxTokens,
      maxRetries: 0,
      configuration: { baseURL: `${baseUrl}/v1` },
    });
  const text = (content: unknown): string => (typeof content === 'string' ? content : JSON.stringify(content));
  return {
    name: 'LangChain JS',
    async chat(a) {
      const msg = await model(a).invoke([{ role: 'user', content: a.content }], { seed: a.seed });
      return text(msg.content);
    },
    async streamChat(a) {
      let out = '';
      for await (const chunk of await model(a).stream([{ role: 'user', content: a.content }], { seed: a.seed }))
        out += text(chunk.content);
      return out;
    },
  };
}

/** The Vercel AI SDK (`generateText` / `streamText`) over @ai-sdk/openai-compatible against `baseUrl` with `apiKey`. */
export function aiSdkClient(baseUrl: string, apiKey: string): ChatClient {
  const provider = createOpenAICompatible({ name: 'model-gateway', baseURL: `${baseUrl}/v1`, apiKey });
  const opts = (a: ChatAsk) => ({
    model: provider.chatModel(a.model),
    messages: [{ role: 'user' as const, content: a.content }],
    maxOutputTokens: a.maxTokens,
    seed: a.seed,
    maxRetries: 0,
  });
  return {
    name: 'Vercel AI SDK',
    async chat(a) {
      return (await generateText(opts(a))).text;
    },
    async streamChat(a) {
      let failure: unknown = null;
      const result = streamText({
        ...opts(a),
        onError: ({ error }) => {
          failure = error;
        },
      });
      let out = '';
      for await (const part of result.textStream) out += part;
      if (failure !== null) throw failure;
      return out;
    },
  };
}

/** The three clients for one gateway and key. */
export function allChatClients(baseUrl: string, apiKey: string): ChatClient[] {
  return [openaiSdkClient(baseUrl, apiKey), langchainClient(baseUrl, apiKey), aiSdkClient(baseUrl, apiKey)];
}
