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

  /** `message` replaces the composed one (an error rebuilt from a worker thread's report, off-loop.ts). */
  constructor(tokenId: unknown, index: number, vocabSize: number | null, message?: string) {
    super(
      message ??
        `token id ${String(tokenId)} at index ${index} is not in the vocabulary (valid ids 0..${(vocabSize ?? 0) - 1})`,
    );
    this.name = 'InvalidTokenIdError';
    this.tokenId = tokenId;
    this.index = index;
  }
}

/**
 * Why an off-loop tokenizer job (./off-loop.ts) did not run to its result:
 * - `queue-full`: the process's queue already holds its limit of jobs or characters; nothing was queued. The client
 *   may retry later (HTTP 429).
 * - `cancelled`: the job's signal aborted (the client left) before its result came; it was dropped from the queue, or
 *   its result is thrown away when the worker answers.
 * - `worker-failed`: the worker thread could not load the tokenizer directory, or it exited while running this job.
 * Failures of the work itself (a template that raises, an id outside the vocabulary) are not off-loop errors: they
 * reject with the same error the main-thread call throws (`ChatTemplateError`, `RangeError`).
 */
export type OffLoopErrorKind = 'queue-full' | 'cancelled' | 'worker-failed';

/** An off-loop job was refused, cancelled or lost with its worker; see {@link OffLoopErrorKind}. */
export class OffLoopError extends Error {
  readonly kind: OffLoopErrorKind;

  constructor(kind: OffLoopErrorKind, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'OffLoopError';
    this.kind = kind;
  }
}
