/**
 * The router's answers to a front's CALL records: a fresh snapshot (`refresh`) and the Responses store, which must be
 * one per gateway so that `previous_response_id` works from any front (the front's side: front/shared-responses-store.ts).
 */
import type { ResponsesStore, StoredResponse } from '../../server/responses/store.js';
import type { GroupSnapshot } from '../channel/records.js';

/**
 * The value of call `method` with `args` (as the front sent them): `refresh` → every group's snapshot (`snapshot()`);
 * `store.put` [id, stored] → null; `store.get` id → the stored response or null; `store.delete` id → whether it was
 * held; `store.prefetch` {responses, items} → {responses, items} as [id, value or null] pairs. Throws RangeError for
 * an unknown method (the front gets it as the call's error).
 */
export function routerCallValue(
  method: string,
  args: unknown,
  store: ResponsesStore,
  snapshot: () => GroupSnapshot[],
): unknown {
  switch (method) {
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
