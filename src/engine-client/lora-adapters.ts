/**
 * The LoRA adapters a vLLM engine group serves (vLLM's `--lora-modules` and `/v1/load_lora_adapter`, issue 31 part
 * 2): each has a served name, an integer id unique in the group (≥ 1; vLLM's frontends number them the same way) and
 * the path the engines load it from. A request naming one carries its `LoRARequest` (engine-wire.md 5.2 index 6);
 * an engine loads the adapter on first use from that path, so adapters survive a rank's restart without replay.
 * Loading one at run time asks every ready rank to `add_lora` it (a utility call, docs/wire/vllm-utility.md) and
 * registers it only when all of them could; unloading asks them to `remove_lora` it and forgets it.
 */
import type { LoraTarget } from '../protocols/types.js';
import { EngineClientError, describeError } from './errors.js';
import type { UtilityCalls, UtilityOutcome } from './utility-calls.js';

/** An adapter as configured: served name, path on the engines' host, optional base model name. */
export interface LoraModule {
  name: string;
  path: string;
  baseModelName?: string | null;
}

/**
 * One `--lora-modules` value, as vLLM reads it: `NAME=PATH`, or a JSON object `{"name", "path", "base_model_name"?}`.
 * Throws RangeError naming what is wrong.
 */
export function parseLoraModule(text: string): LoraModule {
  const m = parseLoraModuleText(text);
  checkAdapterName(m.name);
  return m;
}

/** Longest adapter name (characters). */
export const MAX_ADAPTER_NAME_CHARS = 256;

/**
 * Throws RangeError unless `name` can serve as a model name: not blank, at most `MAX_ADAPTER_NAME_CHARS` characters,
 * no control characters.
 */
export function checkAdapterName(name: string): void {
  if (name.trim() === '') throw new RangeError('an adapter name must not be blank');
  if (name.length > MAX_ADAPTER_NAME_CHARS)
    throw new RangeError(`an adapter name is at most ${MAX_ADAPTER_NAME_CHARS} characters`);
  // eslint-disable-next-line no-control-regex -- what it refuses
  if (/[\u0000-\u001f\u007f]/.test(name)) throw new RangeError('an adapter name must not hold control characters');
}

function parseLoraModuleText(text: string): LoraModule {
  const t = text.trim();
  if (t.startsWith('{')) {
    let v: unknown;
    try {
      v = JSON.parse(t);
    } catch {
      throw new RangeError(`not valid JSON: ${t}`);
    }
    const o = v as { name?: unknown; path?: unknown; base_model_name?: unknown };
    if (typeof o.name !== 'string' || o.name === '' || typeof o.path !== 'string' || o.path === '')
      throw new RangeError(`a JSON LoRA module needs "name" and "path" strings: ${t}`);
    if (o.base_model_name !== undefined && o.base_model_name !== null && typeof o.base_model_name !== 'string')
      throw new RangeError(`"base_model_name" must be a string: ${t}`);
    return { name: o.name, path: o.path, baseModelName: (o.base_model_name as string | null | undefined) ?? null };
  }
  const eq = t.indexOf('=');
  // As vLLM's parser: exactly one '='.
  if (eq <= 0 || eq === t.length - 1 || t.indexOf('=', eq + 1) >= 0)
    throw new RangeError(`expected NAME=PATH, got '${t}'`);
  return { name: t.slice(0, eq), path: t.slice(eq + 1), baseModelName: null };
}

/** How the registry reaches the ranks (the engine client provides it). */
export interface UtilityChannel {
  /** The ranks a call goes to now (ready ones), with their identities. */
  readyRanks(): readonly { engineIndex: number; identity: Uint8Array }[];
  /** The UTILITY payload of a call (the protocol's `encodeUtility`). */
  encode(callId: number, method: string, args: readonly unknown[]): Uint8Array;
  /** Send a UTILITY payload to a rank; rejects when it cannot be sent. */
  send(identity: Uint8Array, payload: Uint8Array): Promise<void>;
}

/** The outcome of a load or unload: done, or why not (`exists` / `missing` are the caller's; `engine` the ranks'). */
export type AdapterChange =
  | { ok: true; adapter: LoraTarget }
  | { ok: false; reason: 'exists' | 'missing' | 'engine'; message: string };

/** Most adapters one group serves (vLLM bounds its host-memory LoRA cache too; each adapter is a /v1/models card). */
export const MAX_ADAPTERS = 1024;

/** How long a rank may take to answer an adapter call (ms): loading weights from disk can take seconds. */
export const ADAPTER_CALL_TIMEOUT_MS = 30_000;

/** The adapter registry of one group (see the module comment). */
export class LoraAdapters {
  private readonly byName = new Map<string, LoraTarget>();
  /** Names with a load or unload in progress (a second change of the same name is refused meanwhile). */
  private readonly changing = new Set<string>();
  private nextId = 1;

  /** `modules`: the configured adapters (`--lora-modules`), registered at once. Throws RangeError for a duplicate name. */
  constructor(
    private readonly calls: UtilityCalls,
    private readonly channel: UtilityChannel,
    modules: readonly LoraModule[] = [],
  ) {
    for (const m of modules) {
      if (this.byName.has(m.name)) throw new RangeError(`LoRA adapter '${m.name}' is configured twice`);
      this.byName.set(m.name, this.targetOf(m));
    }
  }

  /** Every adapter, in registration order. */
  list(): LoraTarget[] {
    return [...this.byName.values()];
  }

  /** The adapter served under `name`, if any. */
  get(name: string): LoraTarget | undefined {
    return this.byName.get(name);
  }

  /**
   * Load adapter `m` on every ready rank (`add_lora`), then serve it. Resolves `exists` for a name already served
   * or being changed, `engine` (with the rank's message) when a rank refused it; rejects with EngineClientError
   * `unavailable` when no rank is ready or a rank did not answer in `timeoutMs`.
   */
  async load(m: LoraModule, timeoutMs = ADAPTER_CALL_TIMEOUT_MS): Promise<AdapterChange> {
    if (this.byName.has(m.name) || this.changing.has(m.name))
      return { ok: false, reason: 'exists', message: `The lora adapter '${m.name}' has already been loaded.` };
    if (this.byName.size + this.changing.size >= MAX_ADAPTERS)
      return {
        ok: false,
        reason: 'engine',
        message: `a group serves at most ${MAX_ADAPTERS} LoRA adapters: unload one first`,
      };
    this.changing.add(m.name);
    try {
      // The id is taken now: another load may register while the ranks answer this one.
      const target = this.targetOf(m);
      let refused: string | null;
      try {
        refused = await this.everyRank('add_lora', [{ lora: target }], timeoutMs);
      } catch (err) {
        // Not answered everywhere (a rank stalled or died): the ranks that took it drop it again.
        this.dropEverywhere(target.id, timeoutMs);
        throw err;
      }
      if (refused !== null) {
        this.dropEverywhere(target.id, timeoutMs);
        return { ok: false, reason: 'engine', message: refused };
      }
      this.byName.set(m.name, target);
      return { ok: true, adapter: target };
    } finally {
      this.changing.delete(m.name);
    }
  }

  /**
   * Stop serving adapter `name` at once, and ask every ready rank to `remove_lora` it in the background. Resolves
   * `missing` for an unknown name or one being loaded.
   */
  async unload(name: string, timeoutMs = ADAPTER_CALL_TIMEOUT_MS): Promise<AdapterChange> {
    const adapter = this.byName.get(name);
    if (adapter === undefined || this.changing.has(name))
      return { ok: false, reason: 'missing', message: `The lora adapter '${name}' cannot be found.` };
    this.byName.delete(name);
    this.dropEverywhere(adapter.id, timeoutMs);
    return { ok: true, adapter };
  }

  /**
   * Ask every ready rank to `remove_lora` adapter `id`, in the background: it only frees the ranks' memory, so nobody
   * waits for a rank that does not answer (its call ends at its deadline or when the rank goes away).
   */
  private dropEverywhere(id: number, timeoutMs: number): void {
    this.everyRank('remove_lora', [id], timeoutMs).catch(() => null);
  }

  /** The wire target of `m`, with a fresh id (ids are never reused, so a late request cannot name a new adapter). */
  private targetOf(m: LoraModule): LoraTarget {
    return { name: m.name, id: this.nextId++, path: m.path, baseModelName: m.baseModelName ?? null };
  }

  /**
   * Call `method(args)` on every ready rank at once; resolves null when all succeeded, else the first failure text
   * naming its rank. Rejects as `load` says.
   */
  private async everyRank(method: string, args: readonly unknown[], timeoutMs: number): Promise<string | null> {
    const ranks = this.channel.readyRanks();
    if (ranks.length === 0)
      throw new EngineClientError('unavailable', `no DP rank is ready to ${method}: retry once the ranks have joined`);
    const outcomes = await Promise.all(
      ranks.map(async (r): Promise<[number, UtilityOutcome]> => {
        const { callId, outcome } = this.calls.begin(r.engineIndex, method, timeoutMs);
        try {
          await this.channel.send(r.identity, this.channel.encode(callId, method, args));
        } catch (err) {
          this.calls.abandon(
            callId,
            new EngineClientError(
              'unavailable',
              `${method} not sent to DP rank ${r.engineIndex}: ${describeError(err)}`,
            ),
          );
        }
        return [r.engineIndex, await outcome];
      }),
    );
    const failed = outcomes.find(([, o]) => !o.ok);
    if (failed === undefined) return null;
    const [rank, o] = failed;
    return `DP rank ${rank}: ${(o as { failure: string }).failure}`;
  }
}
