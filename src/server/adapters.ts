/**
 * LoRA adapters as a request names them (issue 31 part 2): a request's `model` is a served name (the base model) or
 * the name of an adapter some engine group serves (vLLM's behaviour: `--lora-modules` names are model names); it
 * goes only to groups that serve that adapter, and carries the adapter's `LoRARequest` of the chosen group.
 */
import type { LoraTarget } from '../protocols/types.js';
import type { BackendGroup } from './backend.js';
import { ApiError, RETRY_AFTER_UNAVAILABLE_SECONDS } from './errors.js';

/**
 * Refuse a `model` that is not one of the served names with 404 (vLLM's behaviour); an absent/null model means the
 * served one. `served` is the served model name or the list of them (`--served-model-name`, first = reported);
 * `adapters`, the LoRA adapter names also accepted (listed in the message).
 */
export function checkModel(
  model: string | null | undefined,
  served: string | readonly string[],
  adapters: readonly string[] = [],
): void {
  const names = typeof served === 'string' ? [served] : served;
  if (model === null || model === undefined || names.includes(model) || adapters.includes(model)) return;
  const list = [...names, ...adapters].map((n) => `'${n}'`).join(', ');
  throw new ApiError(404, `The model '${model}' does not exist (this gateway serves ${list})`, {
    type: 'not_found_error',
    param: 'model',
    code: 'model_not_found',
  });
}

/**
 * The LoRA adapter `model` names (null: the base model), among the adapters of `groups`. Throws `ApiError` 404 when
 * `model` is neither a served name nor an adapter (checkModel).
 */
export function adapterOf(
  groups: readonly BackendGroup[],
  model: string | null | undefined,
  served: readonly string[],
): string | null {
  if (model === null || model === undefined || served.includes(model)) return null;
  if (groups.some((g) => g.backend.adapters?.get(model) !== undefined)) return model;
  checkModel(model, served, [...new Set(groups.flatMap((g) => (g.backend.adapters?.list() ?? []).map((a) => a.name)))]);
  return null;
}

/**
 * The groups of `candidates` that serve `adapter` (all of them for the base model). Throws `ApiError` 503 with
 * `Retry-After` when the groups that serve it cannot serve now.
 */
export function adapterGroups(candidates: readonly BackendGroup[], adapter: string | null): BackendGroup[] {
  if (adapter === null) return [...candidates];
  const out = candidates.filter((g) => g.backend.adapters?.get(adapter) !== undefined);
  if (out.length > 0) return out;
  throw new ApiError(503, `no engine group that serves the LoRA adapter '${adapter}' can serve now`, {
    code: 'engine_dead',
    retryAfterSeconds: RETRY_AFTER_UNAVAILABLE_SECONDS,
  });
}

/** `{lora}` of `adapter` in `group` (empty for the base model or an adapter unloaded meanwhile). */
export function loraOf(group: BackendGroup, adapter: string | null): { lora?: LoraTarget } {
  const lora = adapter === null ? undefined : group.backend.adapters?.get(adapter);
  return lora === undefined ? {} : { lora };
}

/** Every LoRA adapter some engine group serves, one per name (the first group's), in group then load order. */
export function servedAdapters(ctx: { chooser: { groups: readonly BackendGroup[] } }): LoraTarget[] {
  const byName = new Map<string, LoraTarget>();
  for (const g of ctx.chooser.groups)
    for (const a of g.backend.adapters?.list() ?? []) if (!byName.has(a.name)) byName.set(a.name, a);
  return [...byName.values()];
}

/** The names of `servedAdapters` (a request's `model` may name any; an adapter uses the base model's tokenizer). */
export function adapterNames(ctx: { chooser: { groups: readonly BackendGroup[] } }): string[] {
  return servedAdapters(ctx).map((a) => a.name);
}
