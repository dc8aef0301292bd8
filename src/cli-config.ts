/**
 * Layered configuration of `model-gateway serve` (issue #13 part 4): every option of the CLI's parseArgs table can
 * also come from a `MODEL_GATEWAY_*` environment variable or from a `--config FILE` (YAML or JSON), with the
 * precedence **flag > environment > file**. The layering is generic over the options table: an option added to the
 * table is configurable in all three places without more code.
 *
 * How each source is read:
 * - flags: as given (parseArgs tokens). `--served-model-name a b` (vLLM's space-separated form) is accepted for the
 *   options listed in `spaceSeparated`.
 * - environment: `MODEL_GATEWAY_<NAME>` with the option name upper-cased and `-` as `_` (`--dp-policy` →
 *   `MODEL_GATEWAY_DP_POLICY`). A boolean takes `1/true/yes/on` or `0/false/no/off`; an option that may repeat takes a
 *   comma-separated list. `MODEL_GATEWAY_CONFIG` names the config file when `--config` is not given. An unknown
 *   `MODEL_GATEWAY_*` variable is an error (it is a typo).
 * - file: a YAML (or JSON, a subset of YAML) mapping whose keys are option names (`dp-policy`; `dp_policy` and
 *   `dpPolicy` are accepted too). Scalars, or lists for options that may repeat. Engine groups go in a `groups:` list
 *   of mappings, each with exactly one group opener (`engine-url`, `sim`, `worker`, `sim-worker`) and that group's
 *   options; group options at the top level are defaults for every group.
 * Engine groups are one unit: the highest-precedence source that names any group option supplies all of them (a
 * `--sim 2` on the command line replaces the file's groups instead of adding to them).
 * The result is one argument list, parsed by the CLI as if typed; `origins` says where each option came from, for
 * error messages.
 */
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { parse as parseYaml } from 'yaml';

/** One entry of the parseArgs options table (the subset this module reads). */
export interface OptionSpec {
  type: 'string' | 'boolean';
  multiple?: boolean;
  short?: string;
}

/** A configuration mistake (bad file, bad variable, bad flag): the CLI prints it as a usage error. */
export class ConfigSourceError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ConfigSourceError';
  }
}

/** What `layerServeArgs` needs to know about the CLI. */
export interface LayerOptions {
  /** The parseArgs options table of `serve`. */
  options: Readonly<Record<string, OptionSpec>>;
  /** Options that start an engine group (`engine-url`, `sim`, ...). */
  groupOpeners: ReadonlySet<string>;
  /** Options that apply to the group before them (`engine`, `dp-size`, ...). */
  groupOptions: ReadonlySet<string>;
  /** Options that only make sense as flags (`help`, `version`, `config`). */
  flagOnly: ReadonlySet<string>;
  /** Options whose flag may take several space-separated values (`served-model-name`). */
  spaceSeparated?: ReadonlySet<string>;
  /** The environment (default `process.env`). */
  env?: Readonly<Record<string, string | undefined>>;
  /** Read a config file's text (default `readFileSync(path, 'utf8')`). */
  readFile?: (path: string) => string;
}

/** One option occurrence: `value` is the string value, true for a boolean flag, or false for a boolean turned off. */
interface Entry {
  name: string;
  value: string | boolean;
}

type Source = 'flag' | 'env' | 'file';

/** The layered argument list and where each option name came from (`--port` → `MODEL_GATEWAY_PORT`, ...). */
export interface LayeredArgs {
  argv: string[];
  origins: Map<string, string>;
  /** The config file read, or null. */
  configFile: string | null;
}

export const ENV_PREFIX = 'MODEL_GATEWAY_';

/** The environment variable of option `name`: `dp-policy` → `MODEL_GATEWAY_DP_POLICY`. */
export function envName(name: string): string {
  return ENV_PREFIX + name.toUpperCase().replaceAll('-', '_');
}

const TRUE = new Set(['1', 'true', 'yes', 'on']);
const FALSE = new Set(['0', 'false', 'no', 'off', '']);

/** `--served-model-name a b --port 1` → `--served-model-name a --served-model-name b --port 1`. */
function expandSpaceSeparated(argv: readonly string[], names: ReadonlySet<string>): string[] {
  const out: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    out.push(arg);
    if (!arg.startsWith('--') || !names.has(arg.slice(2))) continue;
    if (i + 1 < argv.length) out.push(argv[++i]!);
    while (i + 1 < argv.length && !argv[i + 1]!.startsWith('-')) out.push(arg, argv[++i]!);
  }
  return out;
}

/** The flag entries of `argv` in order (throws ConfigSourceError on an unknown flag or a stray argument). */
function flagEntries(argv: readonly string[], options: LayerOptions['options']): Entry[] {
  let tokens;
  try {
    tokens = parseArgs({
      args: [...argv],
      options: { ...options },
      strict: true,
      allowPositionals: false,
      tokens: true,
    }).tokens;
  } catch (err) {
    const e = err as { code?: string; message?: string };
    if (e.code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION') {
      const m = /'([^']+)'/.exec(e.message ?? '');
      throw new ConfigSourceError(`unknown option ${m ? `'${m[1]}'` : ''}`.trim());
    }
    if (e.code === 'ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL') {
      const m = /'([^']+)'/.exec(e.message ?? '');
      throw new ConfigSourceError(`unexpected argument ${m ? `'${m[1]}'` : ''}`.trim());
    }
    if (e.code === 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE') {
      throw new ConfigSourceError((e.message ?? 'invalid option value').split('. ')[0]!);
    }
    throw new ConfigSourceError(e.message ?? String(err));
  }
  const out: Entry[] = [];
  for (const t of tokens) if (t.kind === 'option') out.push({ name: t.name, value: t.value ?? true });
  return out;
}

/** The environment entries (group openers first, then group options, then the rest, each in table order). */
function envEntries(env: Readonly<Record<string, string | undefined>>, o: LayerOptions): Entry[] {
  const byEnv = new Map(Object.keys(o.options).map((name) => [envName(name), name]));
  for (const key of Object.keys(env)) {
    if (!key.startsWith(ENV_PREFIX) || key === envName('config')) continue;
    const name = byEnv.get(key);
    if (name === undefined || o.flagOnly.has(name)) {
      throw new ConfigSourceError(
        `unknown environment variable ${key} (the MODEL_GATEWAY_* variables mirror the serve options)`,
      );
    }
  }
  const rank = (name: string) => (o.groupOpeners.has(name) ? 0 : o.groupOptions.has(name) ? 1 : 2);
  const names = Object.keys(o.options)
    .filter((n) => env[envName(n)] !== undefined)
    .sort((a, b) => rank(a) - rank(b));
  const out: Entry[] = [];
  for (const name of names) {
    const raw = env[envName(name)]!;
    const spec = o.options[name]!;
    if (spec.type === 'boolean') {
      const v = raw.trim().toLowerCase();
      if (!TRUE.has(v) && !FALSE.has(v))
        throw new ConfigSourceError(`${envName(name)} must be true or false, got '${raw}'`);
      out.push({ name, value: TRUE.has(v) });
    } else if (spec.multiple) {
      for (const part of raw
        .split(',')
        .map((p) => p.trim())
        .filter((p) => p !== ''))
        out.push({ name, value: part });
    } else {
      out.push({ name, value: raw });
    }
  }
  return out;
}

/** `dp_policy` / `dpPolicy` → `dp-policy`. */
function optionKey(key: string): string {
  return key
    .replace(/([a-z0-9])([A-Z])/g, '$1-$2')
    .replaceAll('_', '-')
    .toLowerCase();
}

function isMapping(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** The entries of one mapping of the config file (`where` names it in errors). */
function mappingEntries(
  map: Record<string, unknown>,
  o: LayerOptions,
  where: string,
  allow: (name: string) => string | null,
): Entry[] {
  const out: Entry[] = [];
  for (const [rawKey, value] of Object.entries(map)) {
    const name = optionKey(rawKey);
    const spec = o.options[name];
    if (spec === undefined || o.flagOnly.has(name)) throw new ConfigSourceError(`${where}: unknown option '${rawKey}'`);
    const refusal = allow(name);
    if (refusal !== null) throw new ConfigSourceError(`${where}: '${rawKey}' ${refusal}`);
    if (value === null || value === undefined) continue;
    const values = Array.isArray(value) ? value : [value];
    if (Array.isArray(value) && !spec.multiple)
      throw new ConfigSourceError(`${where}: '${rawKey}' takes one value, got a list`);
    for (const v of values) {
      if (spec.type === 'boolean') {
        if (typeof v !== 'boolean')
          throw new ConfigSourceError(`${where}: '${rawKey}' must be true or false, got ${JSON.stringify(v)}`);
        out.push({ name, value: v });
      } else {
        if (typeof v !== 'string' && typeof v !== 'number') {
          throw new ConfigSourceError(`${where}: '${rawKey}' must be a string or a number, got ${JSON.stringify(v)}`);
        }
        out.push({ name, value: String(v) });
      }
    }
  }
  return out;
}

/** The entries of a parsed config file: top-level defaults and options, a top-level group, then `groups`. */
export function fileEntries(doc: unknown, o: LayerOptions, file: string): Entry[] {
  if (doc === null || doc === undefined) return [];
  if (!isMapping(doc))
    throw new ConfigSourceError(`${file}: the top level must be a mapping of option names to values`);
  const { groups, ...top } = doc;
  const topEntries = mappingEntries(top, o, file, () => null);
  const rank = (e: Entry) => (o.groupOptions.has(e.name) ? 0 : o.groupOpeners.has(e.name) ? 1 : 2);
  const out = topEntries.sort((a, b) => rank(a) - rank(b));
  if (groups === undefined || groups === null) return out;
  if (!Array.isArray(groups)) throw new ConfigSourceError(`${file}: 'groups' must be a list of engine groups`);
  groups.forEach((g, i) => {
    const where = `${file}: groups[${i}]`;
    if (!isMapping(g)) throw new ConfigSourceError(`${where} must be a mapping`);
    const entries = mappingEntries(g, o, where, (name) =>
      o.groupOpeners.has(name) || o.groupOptions.has(name)
        ? null
        : 'is not an engine-group option (put it at the top level)',
    );
    const openers = entries.filter((e) => o.groupOpeners.has(e.name));
    if (openers.length !== 1) {
      throw new ConfigSourceError(
        `${where} needs exactly one of ${[...o.groupOpeners].join(', ')}; got ${openers.length}`,
      );
    }
    out.push(openers[0]!, ...entries.filter((e) => !o.groupOpeners.has(e.name)));
  });
  return out;
}

/** Read and parse a YAML/JSON config file. Throws ConfigSourceError naming the file. */
function loadFile(path: string, read: (p: string) => string): unknown {
  let text: string;
  try {
    text = read(path);
  } catch (err) {
    const code = (err as { code?: string }).code;
    throw new ConfigSourceError(
      `cannot read the config file ${path}${code === 'ENOENT' ? ': no such file' : `: ${(err as Error).message}`}`,
    );
  }
  try {
    return parseYaml(text);
  } catch (err) {
    throw new ConfigSourceError(
      `config file ${path} is not valid YAML or JSON: ${(err as Error).message.split('\n')[0]}`,
    );
  }
}

function serialize(entries: readonly Entry[]): string[] {
  const out: string[] = [];
  for (const e of entries) {
    if (e.value === false) continue;
    out.push(e.value === true ? `--${e.name}` : `--${e.name}=${e.value}`);
  }
  return out;
}

/**
 * Merge the command line `argv` with the environment and the config file (see the module comment). Throws
 * `ConfigSourceError` for an unknown flag, variable or file key, a bad value type, or an unreadable / unparseable
 * file. The returned `argv` still has to be parsed (and its values checked) by the CLI.
 */
export function layerServeArgs(argv: readonly string[], o: LayerOptions): LayeredArgs {
  const env = o.env ?? process.env;
  const flags = flagEntries(expandSpaceSeparated(argv, o.spaceSeparated ?? new Set()), o.options);
  const configFlag = [...flags].reverse().find((e) => e.name === 'config');
  const configFile = typeof configFlag?.value === 'string' ? configFlag.value : env[envName('config')] || null;
  const sources: Record<Source, Entry[]> = {
    flag: flags.filter((e) => !['config'].includes(e.name)),
    env: envEntries(env, o),
    file:
      configFile !== null
        ? fileEntries(loadFile(configFile, o.readFile ?? ((p) => readFileSync(p, 'utf8'))), o, configFile)
        : [],
  };
  const order: Source[] = ['flag', 'env', 'file'];
  const isGroup = (name: string) => o.groupOpeners.has(name) || o.groupOptions.has(name);
  const origins = new Map<string, string>();
  const originOf = (source: Source, name: string) =>
    source === 'flag' ? `--${name}` : source === 'env' ? envName(name) : `${name} in ${configFile}`;

  const composed: Entry[] = [];
  const groupSource = order.find((s) => sources[s].some((e) => isGroup(e.name)));
  if (groupSource !== undefined) {
    for (const e of sources[groupSource]) {
      if (!isGroup(e.name)) continue;
      composed.push(e);
      origins.set(e.name, originOf(groupSource, e.name));
    }
  }
  for (const name of Object.keys(o.options)) {
    if (isGroup(name)) continue;
    const source = order.find((s) => sources[s].some((e) => e.name === name));
    if (source === undefined) continue;
    composed.push(...sources[source].filter((e) => e.name === name));
    origins.set(name, originOf(source, name));
  }
  return { argv: serialize(composed), origins, configFile };
}
