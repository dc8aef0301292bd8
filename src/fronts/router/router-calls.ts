/**
 * The router's answers to a front's CALL records: a fresh snapshot (`refresh`) and the Responses store, which must be
 * one per gateway so that `previous_response_id` works from any front (the front's side: front/shared-responses-store.ts).
 */
import type { ResponsesStore, StoredResponse } from '../../server/responses/store.js';
import type { GroupSnapshot } from '../channel/records.js';
import type { LoraModule } from '../../engine-client/lora-adapters.js';
import type { ServedGroup } from './served-groups.js';

/**
 * The value of call `method` with `args` (as the front sent them): `refresh` → every group's snapshot (`snapshot()`);
 * `store.put` [id, stored] → null; `store.get` id → the stored response or null; `store.delete` id → whether it was
 * held; `store.prefetch` {responses, items} → {responses, items} as [id, value or null] pairs; `lora.load` [group,
 * module] / `lora.unload` [group, name] → a promise of the group's AdapterChange. Throws RangeError for an unknown
 * method (the front gets it as the call's error).
 */
export function routerCallValue(
  method: string,
  args: unknown,
  store: ResponsesStore,
  snapshot: () => GroupSnapshot[],
  groups: readonly ServedGroup[] = [],
): unknown {
  switch (method) {
    case 'lora.load':
    case 'lora.unload': {
      // A LoRA adapter change in group `group` (routes/lora.ts through RemoteBackend): a promise of its AdapterChange.
      const [group, arg] = args as [number, LoraModule | string];
      const adapters = groups[group]?.backend.adapters;
      if (adapters === undefined || adapters === null) throw new RangeError(`group ${group} serves no LoRA adapters`);
      return method === 'lora.load' ? adapters.load(arg as LoraModule) : adapters.unload(arg as string);
    }
    case 'refresh':
      return snapshot();
    case 'store.put': {
      const [id, stored] = args as [string, StoredResponse];
      store.put(id, stored);
      return null;
    }
    case 'store.get':
      return store.get(args as string) ?? null;
    case 'store.delete':
      return store.delete(args as string);
    case 'store.prefetch': {
      const { responses, items } = args as { responses: string[]; items: string[] };
      return {
        responses: responses.map((id) => [id, store.get(id) ?? null]),
        items: items.map((id) => [id, store.item(id) ?? null]),
      };
    }
    default:
      throw new RangeError(`unknown call ${JSON.stringify(method)}`);
  }
}
