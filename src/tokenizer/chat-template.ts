/**
 * Chat templates: selecting the template of a tokenizer directory and rendering it with `@huggingface/jinja`
 * (gateway.md section 5: chat templates are applied in the gateway, before the request reaches the engine client).
 *
 * Selection follows transformers' `apply_chat_template`: `chat_template` in `tokenizer_config.json` is either one
 * string or a list of `{ name, template }`; with a list, a request carrying tools uses `tool_use` when present,
 * otherwise `default`. Newer checkpoints store the template beside the config instead (`chat_template.jinja`, or
 * `chat_template.json` holding `{ "chat_template": ... }`); those are used when the config has none.
 */
import { setFlagsFromString } from 'node:v8';
import { Environment, Interpreter, Template } from '@huggingface/jinja';
import { ChatTemplateError } from './errors.js';
import type { JsonObject, WarningSink } from './model-files.js';

/**
 * Receiver shapes V8 tracks per property-access site before the site goes megamorphic (V8's default is 4). See
 * {@link tuneV8ForChatTemplates}.
 */
export const POLYMORPHIC_MAP_COUNT = 16;

/**
 * Lets a property-access site stay polymorphic for up to {@link POLYMORPHIC_MAP_COUNT} receiver shapes, process-wide
 * (`--max-valid-polymorphic-map-count`; call once at process start, before requests are served).
 *
 * Why (issue 9, CPU per request): `@huggingface/jinja` creates a `RuntimeValue` subclass instance for every value a
 * render touches, and its base class declares fields (`type = ...; value;`). The base class's field initializer is one
 * site shared by all 12 subclasses; past 4 shapes V8 (Node 20) marks it megamorphic, and a megamorphic class-field
 * definition goes through the runtime. With 0.5.11 that was two thirds of a render (a one-message Qwen3 chat: 71 µs,
 * 21–26 µs with the flag); 0.5.13 builds far fewer values per render (4.9 µs, 4.5 with the flag; shared 2-core dev
 * box). The output is the same: the flag only changes how V8 caches property lookups. V8 reads the flag when a site
 * changes state, so setting it at run time is enough.
 */
export function tuneV8ForChatTemplates(): void {
  setFlagsFromString(`--max-valid-polymorphic-map-count=${POLYMORPHIC_MAP_COUNT}`);
}

/** The identifier `raise_exception` is renamed to inside parsed templates so our own function is the one called. */
const RAISE_EXCEPTION_ALIAS = '__gateway_raise_exception';

/**
 * Names the caller may not set through template kwargs: the ones set explicitly by
 * {@link ChatTemplateSet.render}, and the globals `@huggingface/jinja` declares itself (declaring them twice throws).
 */
const RESERVED_KWARGS = new Set([
  'messages',
  'tools',
  'add_generation_prompt',
  'raise_exception',
  RAISE_EXCEPTION_ALIAS,
  'true',
  'false',
  'none',
  'True',
  'False',
  'None',
  'range',
  'strftime_now',
]);

/** Renames every `raise_exception` identifier in a parsed template (any AST depth) to {@link RAISE_EXCEPTION_ALIAS}. */
function renameRaiseException(node: unknown, seen: Set<object>): void {
  if (typeof node !== 'object' || node === null || seen.has(node)) return;
  seen.add(node);
  if (Array.isArray(node)) {
    for (const child of node) renameRaiseException(child, seen);
    return;
  }
  const record = node as Record<string, unknown>;
  if (record.type === 'Identifier' && record.value === 'raise_exception') record.value = RAISE_EXCEPTION_ALIAS;
  for (const value of Object.values(record)) renameRaiseException(value, seen);
}

function raiseFromTemplate(...args: unknown[]): never {
  const message = args.length === 0 ? 'the chat template raised an exception' : args.map(String).join(' ');
  throw new ChatTemplateError('raised', message);
}

/** One template text, parsed lazily on first use. */
class LazyTemplate {
  private parsed: Template | null = null;

  constructor(
    readonly name: string,
    readonly source: string,
  ) {}

  /** @throws ChatTemplateError `parse` when the text is not valid Jinja for `@huggingface/jinja`. */
  get(): Template {
    if (this.parsed === null) {
      let template: Template;
      try {
        template = new Template(this.source);
      } catch (error) {
        throw new ChatTemplateError(
          'parse',
          `chat template '${this.name}' failed to parse: ${(error as Error).message}`,
          {
            cause: error,
          },
        );
      }
      renameRaiseException(template.parsed, new Set());
      this.parsed = template;
    }
    return this.parsed;
  }
}

/**
 * The variables `@huggingface/jinja`'s `Template.render` declares in every render's environment before the caller's
 * (its unexported `setupGlobals`: `true`, `false`, `none`, `raise_exception`, `range`, `strftime_now`, and their
 * capitalized forms), as the runtime values it declares, read once by watching one render of an empty template.
 */
function libraryGlobals(): ReadonlyArray<[string, unknown]> {
  const proto = Environment.prototype as unknown as { declareVariable(name: string, value: unknown): unknown };
  const declare = proto.declareVariable;
  const seen: Array<[string, unknown]> = [];
  proto.declareVariable = function declareVariable(this: unknown, name: string, value: unknown): unknown {
    seen.push([name, value]);
    return declare.call(this, name, value);
  };
  try {
    new Template('').render({});
  } finally {
    proto.declareVariable = declare;
  }
  return seen;
}

let globalsOnce: ReadonlyArray<[string, unknown]> | null = null;

/**
 * The parent scope of every render with these special tokens (one per tokenizer): the library's globals, then the
 * special-token strings, converted to runtime values once (issue 9, CPU per request: the library's `render`
 * re-declared them in a fresh environment every time). A render's own environment is a child of it, so a name the
 * render declares (a template kwarg named like a special token) shadows the parent's, as it replaced it before; the
 * values are immutable strings, booleans, null and functions, and a template's `{% set %}` writes to the child.
 */
const parentScopes = new WeakMap<Readonly<Record<string, string>>, Environment>();
function parentScope(specialTokens: Readonly<Record<string, string>>): Environment {
  let env = parentScopes.get(specialTokens);
  if (env === undefined) {
    env = new Environment();
    globalsOnce ??= libraryGlobals();
    const declare = (env as unknown as { declareVariable(name: string, value: unknown): unknown }).declareVariable.bind(
      env,
    );
    for (const [name, value] of globalsOnce) declare(name, value);
    for (const [name, value] of Object.entries(specialTokens)) {
      if (!RESERVED_KWARGS.has(name)) env.set(name, value);
    }
    parentScopes.set(specialTokens, env);
  }
  return env;
}

/** Variables passed to a chat template render besides the per-request ones. */
export interface ChatTemplateRenderInput {
  /** The conversation, already shaped as plain objects (`{ role, content, ... }`). */
  messages: readonly Record<string, unknown>[];
  /** OpenAI-style tool definitions, passed to the template as `tools`; omitted when undefined. */
  tools?: readonly unknown[];
  /** Template variable `add_generation_prompt`. */
  addGenerationPrompt: boolean;
  /** The tokenizer's special-token strings (`bos_token`, `eos_token`, ...), passed as variables. */
  specialTokens: Readonly<Record<string, string>>;
  /** Extra variables (`enable_thinking`, ...); they override `specialTokens`, never the reserved names. */
  templateKwargs?: Readonly<Record<string, unknown>>;
  /** A request's own template text (vLLM `chat_template`, when the server trusts it), used instead of the tokenizer's. */
  templateText?: string;
}

/** Request templates parsed lately (text → template), so a client that sends the same one is not parsed again. */
const requestTemplates = new Map<string, LazyTemplate>();
/** At most this many request templates are kept parsed (least recently used first out). */
const MAX_REQUEST_TEMPLATES = 16;

/** The parsed template of a request's own text. @throws ChatTemplateError `parse` when it does not parse. */
function requestTemplate(text: string): Template {
  let t = requestTemplates.get(text);
  if (t === undefined) {
    t = new LazyTemplate('request', text);
    if (requestTemplates.size >= MAX_REQUEST_TEMPLATES) requestTemplates.delete(requestTemplates.keys().next().value!);
  } else requestTemplates.delete(text);
  requestTemplates.set(text, t);
  return t.get();
}

/**
 * The chat templates of one tokenizer: a default (possibly none) and any named alternatives.
 * Construct with {@link ChatTemplateSet.fromSources}.
 */
export class ChatTemplateSet {
  private constructor(
    private readonly defaultTemplate: LazyTemplate | null,
    private readonly named: ReadonlyMap<string, LazyTemplate>,
    private readonly origin: string,
  ) {}

  /**
   * Builds the set from `tokenizer_config.json`'s `chat_template` (a string, or a list of `{ name, template }`), else
   * from `chat_template.jinja` text, else from `chat_template.json`'s `chat_template`. `origin` names the directory
   * for error messages. Malformed entries are reported to `warn` and skipped; never throws.
   */
  static fromSources(
    sources: { config: JsonObject; jinjaFile: string | null; jsonFile: JsonObject | null },
    origin: string,
    warn: WarningSink,
  ): ChatTemplateSet {
    const candidates: Array<[string, unknown]> = [
      ['tokenizer_config.json', sources.config.chat_template],
      ['chat_template.jinja', sources.jinjaFile],
      ['chat_template.json', sources.jsonFile?.chat_template],
    ];
    for (const [file, value] of candidates) {
      if (value === undefined || value === null) continue;
      if (typeof value === 'string') {
        return new ChatTemplateSet(new LazyTemplate('default', value), new Map(), origin);
      }
      if (Array.isArray(value)) {
        const named = new Map<string, LazyTemplate>();
        for (const entry of value) {
          const e = entry as { name?: unknown; template?: unknown } | null;
          if (e && typeof e.name === 'string' && typeof e.template === 'string') {
            named.set(e.name, new LazyTemplate(e.name, e.template));
          } else {
            warn(`${origin}/${file}: ignoring a chat_template entry without string 'name' and 'template'`);
          }
        }
        return new ChatTemplateSet(named.get('default') ?? null, named, origin);
      }
      warn(`${origin}/${file}: ignoring chat_template of type ${typeof value} (expected a string or a list)`);
    }
    return new ChatTemplateSet(null, new Map(), origin);
  }

  /** Whether any template exists (a default or a named one). */
  get available(): boolean {
    return this.defaultTemplate !== null || this.named.size > 0;
  }

  /** The text of every template (the default first), e.g. to read which tool-call format a model uses. */
  get sources(): string[] {
    const all = [this.defaultTemplate, ...this.named.values()].filter((t): t is LazyTemplate => t !== null);
    return [...new Set(all.map((t) => t.source))];
  }

  /** Names of the named templates (empty for a single-string template). */
  get names(): string[] {
    return [...this.named.keys()];
  }

  /**
   * The template for a request: `tool_use` when the request has tools and such a template exists, else the default.
   * @throws ChatTemplateError `missing` when there is none, `parse` when it does not parse.
   */
  select(hasTools: boolean): Template {
    const chosen = (hasTools ? this.named.get('tool_use') : undefined) ?? this.defaultTemplate;
    if (chosen === null) {
      const detail = this.named.size > 0 ? ` (named templates ${this.names.join(', ')}; none is 'default')` : '';
      throw new ChatTemplateError('missing', `the tokenizer in ${this.origin} has no chat template${detail}`);
    }
    return chosen.get();
  }

  /**
   * Renders the selected template. Variables: the special-token strings, then `templateKwargs` (reserved names
   * skipped), then `messages`, `tools` (when given), `add_generation_prompt`, and `raise_exception(message)`.
   * @returns the prompt text (special tokens appear as their text, to be tokenized without adding more).
   * @throws ChatTemplateError `raised` when the template called `raise_exception`, `render` for any other render
   *   failure, `missing`/`parse` from {@link select}.
   */
  render(input: ChatTemplateRenderInput): string {
    const template =
      input.templateText !== undefined
        ? requestTemplate(input.templateText)
        : this.select(input.tools !== undefined && input.tools.length > 0);
    try {
      // What `Template.render` does, with the globals and special tokens in a parent scope made once (parentScope).
      const env = new Environment(parentScope(input.specialTokens));
      const kwargs = input.templateKwargs;
      if (kwargs !== undefined) {
        for (const key of Object.keys(kwargs)) if (!RESERVED_KWARGS.has(key)) env.set(key, kwargs[key]);
      }
      env.set('messages', input.messages);
      if (input.tools !== undefined) env.set('tools', input.tools);
      env.set('add_generation_prompt', input.addGenerationPrompt);
      env.set(RAISE_EXCEPTION_ALIAS, raiseFromTemplate);
      return new Interpreter(env).run(template.parsed).value as string;
    } catch (error) {
      if (error instanceof ChatTemplateError) throw error;
      throw new ChatTemplateError(
        'render',
        `chat template rendering failed: ${(error as Error)?.message ?? String(error)}`,
        {
          cause: error,
        },
      );
    }
  }
}
