/**
 * The Responses store of a `--workers N` front: the router holds the one store every front shares (`previous_response_id`
 * from any front); this is a local copy of what a request needs (`prefetch` before the synchronous resolution of
 * `previous_response_id` / `item_reference`), with writes sent on through the front's `FrontChannel` (CALL).
 */
import { ResponsesStore, type ResponsesStoreOptions, type StoredResponse } from '../../server/responses/store.js';
import type { FrontChannel } from './front-channel.js';

/**
 * The Responses store of a front: the router holds the store every front shares; this keeps a local copy of what
 * requests of this front need (bounded like the store) and sends every write on.
 */
export class SharedResponsesStore extends ResponsesStore {
  private readonly fetchedItems = new Map<string, Record<string, unknown>>();
  /** Unacknowledged store writes by response id (bounded by the requests in flight: each settles or times out). */
  private readonly writes = new Map<string, Promise<void>>();

  constructor(
    private readonly channel: FrontChannel,
    opts: ResponsesStoreOptions = {},
  ) {
    super(opts);
  }

  override put(id: string, stored: StoredResponse): void {
    if (!this.enabled) return;
    super.put(id, stored);
    // Acknowledged, so the response can wait for it (`written`): the client may read it back from another front at
    // once, whose store.get could otherwise reach the router before this put. A failed or late put is logged; the
    // response still goes out (this front's copy serves requests here).
    const write = this.channel.call('store.put', [id, stored]).then(
      () => undefined,
      (err: unknown) =>
        this.channel.log.warn(
          { id, err: (err as Error).message },
          'Responses store write not acknowledged by the router',
        ),
    );
    this.writes.set(id, write);
    void write.finally(() => {
      if (this.writes.get(id) === write) this.writes.delete(id);
    });
  }

  override written(id: string): Promise<void> {
    return this.writes.get(id) ?? Promise.resolve();
  }

  override item(id: string): Record<string, unknown> | undefined {
    return this.fetchedItems.get(id) ?? super.item(id);
  }

  /** Copy `responseIds` and `itemIds` from the router (the authority): what it does not hold is dropped here too. */
  override async prefetch(responseIds: readonly string[], itemIds: readonly string[]): Promise<void> {
    if (responseIds.length === 0 && itemIds.length === 0) return;
    const got = (await this.channel.call('store.prefetch', { responses: responseIds, items: itemIds })) as {
      responses: Array<[string, StoredResponse | null]>;
      items: Array<[string, Record<string, unknown> | null]>;
    };
    for (const [id, stored] of got.responses) {
      if (stored === null) super.delete(id);
      else super.put(id, stored);
    }
    if (this.fetchedItems.size > 10_000) this.fetchedItems.clear();
    for (const [id, item] of got.items) {
      if (item === null) this.fetchedItems.delete(id);
      else this.fetchedItems.set(id, item);
    }
  }

  override async fetch(id: string): Promise<StoredResponse | undefined> {
    const stored = (await this.channel.call('store.get', id)) as StoredResponse | null;
    return stored ?? undefined;
  }

  override async remove(id: string): Promise<boolean> {
    super.delete(id);
    return (await this.channel.call('store.delete', id)) === true;
  }
}
