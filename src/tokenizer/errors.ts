/**
 * Errors thrown by the tokenizer module (gateway.md section 5: the gateway tokenizes, applies chat templates and
 * detokenizes itself, so these are the only text-processing failures the server has to map).
 */

/**
 * A tokenizer directory could not be loaded: the directory or a required file (`tokenizer.json`,
 * `tokenizer_config.json`) is missing or unreadable, a required file is not valid JSON, or the tokenizer library
 * rejected the definition. `path` names the offending directory or file. Startup-time error: the gateway cannot
 * serve without a tokenizer.
 */
export class TokenizerLoadError extends Error {
  /** The directory or file that was wrong. */
  readonly path: string;

  constructor(message: string, path: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'TokenizerLoadError';
    this.path = path;
  }
}

/**
 * What went wrong with a chat template:
 * - `missing`: the tokenizer has no chat template (none in `tokenizer_config.json`, no `chat_template.jinja`/
 *   `chat_template.json` beside it, or a template list without a `default` entry).
 * - `parse`: the template text is not valid Jinja for `@huggingface/jinja`.
 * - `raised`: the template itself called `raise_exception(message)` (for example "Conversation roles must
 *   alternate"); `message` is the template's text. The request's messages were rejected by the model's own rules.
 * - `render`: rendering failed for another reason (for example a message shape the template cannot handle).
 *
 * The HTTP layer turns `raised` and `render` (and `missing`, which only a chat request reaches) into a 400.
 */
export type ChatTemplateErrorKind = 'missing' | 'parse' | 'raised' | 'render';

/** A chat template could not be selected, parsed or rendered; see {@link ChatTemplateErrorKind}. */
export class ChatTemplateError extends Error {
  readonly kind: ChatTemplateErrorKind;

  constructor(kind: ChatTemplateErrorKind, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'ChatTemplateError';
    this.kind = kind;
  }
}

/**
 * A token id that names no token of this tokenizer: not a safe integer in 0..vocabSize−1, or an id in that range the
 * vocabulary skips. A `RangeError`, as before it had a type of its own, so callers that map RangeError (a client's
 * `/detokenize` ids: 400) keep working; the server maps one raised on an engine's output to a 502 naming the rank
 * (issue 26 part 4: the engine is at fault, not the gateway). `tokenId` is the offending value as given, `index` its
 * position in the list checked.
 */
export class InvalidTokenIdError extends RangeError {
  readonly tokenId: unknown;
  readonly index: number;

  constructor(tokenId: unknown, index: number, vocabSize: number) {
    super(`token id ${String(tokenId)} at index ${index} is not in the vocabulary (valid ids 0..${vocabSize - 1})`);
    this.name = 'InvalidTokenIdError';
    this.tokenId = tokenId;
    this.index = index;
  }
}
