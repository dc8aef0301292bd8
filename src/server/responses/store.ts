/**
 * The bounded in-memory store of Responses-API responses (`store: true`, OpenAI's default): what
 * `previous_response_id`, `item_reference` input items and `GET /v1/responses/{id}` read. The Vercel AI SDK's default
 * `openai()` provider sends earlier assistant turns back as `item_reference`s by id, so a tool round trip through
 * `/v1/responses` needs the items it was given.
 *
 * Bounds: at most `maxResponses` responses and about `maxBytes` of their JSON; the oldest are evicted first (FIFO).
 * The store lives in the gateway process and is lost on restart (documented in docs/http-api.md); a reference to an
 * evicted or unknown id is a 400/404 naming it, never a hang.
 */

/** One stored response: the response object as returned, and the conversation items it was made from. */
export interface StoredResponse {
  /** The full response object (`object: "response"`). */
  response: Record<string, unknown>;
  /** The conversation as the model saw it: earlier turns (resolved) then this request's input items. */
  inputItems: Record<string, unknown>[];
  /** The response's output items. */
  outputItems: Record<string, unknown>[];
}

/** Bounds of a `ResponsesStore`. */
export interface ResponsesStoreOptions {
  /** Responses kept (default 1000; 0 disables storing: `store: true` is then answered with `store: false`). */
  maxResponses?: number;
  /** Approximate bytes of stored JSON kept (default 64 MiB). */
  maxBytes?: number;
}

/** Default of `ResponsesStoreOptions.maxResponses`. */
export const DEFAULT_RESPONSES_STORE_SIZE = 1000;
const DEFAULT_MAX_BYTES = 64 * 1024 * 1024;

/** A FIFO-bounded map of stored responses, with an index of their items by id. */
export class ResponsesStore {
  private readonly responses = new Map<string, { stored: StoredResponse; bytes: number; itemIds: string[] }>();
  private readonly items = new Map<string, { responseId: string; item: Record<string, unknown> }>();
  private bytes = 0;
  private readonly maxResponses: number;
  private readonly maxBytes: number;

  /** Throws RangeError unless both bounds are integers ≥ 0 (`maxBytes` ≥ 1). */
  constructor(opts: ResponsesStoreOptions = {}) {
    this.maxResponses = opts.maxResponses ?? DEFAULT_RESPONSES_STORE_SIZE;
    this.maxBytes = opts.maxBytes ?? DEFAULT_MAX_BYTES;
    if (!Number.isSafeInteger(this.maxResponses) || this.maxResponses < 0)
      throw new RangeError(`maxResponses must be an integer ≥ 0, got ${this.maxResponses}`);
    if (!Number.isSafeInteger(this.maxBytes) || this.maxBytes < 1)
      throw new RangeError(`maxBytes must be an integer ≥ 1, got ${this.maxBytes}`);
  }

  /** Whether responses are stored at all. */
  get enabled(): boolean {
    return this.maxResponses > 0;
  }

  /** Number of responses held. */
  get size(): number {
    return this.responses.size;
  }

  /**
   * Resolves once the `put` of `id` can be read from every front; never rejects. One process: at once (`put` is
   * synchronous). The store of a `--workers N` front overrides it (fronts/front/shared-responses-store.ts).
   */
  written(_id: string): Promise<void> {
    return Promise.resolve();
  }

  /** Store `stored` under `id` (replacing one with the same id), then evict the oldest past the bounds. */
  put(id: string, stored: StoredResponse): void {
    if (!this.enabled) return;
    this.delete(id);
    const bytes = JSON.stringify(stored).length;
    const itemIds: string[] = [];
    for (const item of [...stored.inputItems, ...stored.outputItems]) {
      if (typeof item.id === 'string') {
        this.items.set(item.id, { responseId: id, item });
        itemIds.push(item.id);
      }
    }
    this.responses.set(id, { stored, bytes, itemIds });
    this.bytes += bytes;
    for (const oldest of this.responses.keys()) {
      if (this.responses.size <= this.maxResponses && this.bytes <= this.maxBytes) break;
      if (oldest === id && this.responses.size === 1) break;
      this.delete(oldest);
    }
  }

  /** The stored response `id`, or undefined. */
  get(id: string): StoredResponse | undefined {
    return this.responses.get(id)?.stored;
  }

  /** An input or output item of a stored response by its `id`, or undefined. */
  item(id: string): Record<string, unknown> | undefined {
    return this.items.get(id)?.item;
  }

  /**
   * Make `responseIds` and the items `itemIds` readable by `get` / `item` (they are, in one process; a front of
   * `--workers N` copies them from the router's store, src/fronts/front/shared-responses-store.ts). Awaited before the synchronous
   * resolution of `previous_response_id` and `item_reference`s.
   */
  async prefetch(_responseIds: readonly string[], _itemIds: readonly string[]): Promise<void> {}

  /** `get` for the routes that may ask another process (GET /v1/responses/{id}). */
  async fetch(id: string): Promise<StoredResponse | undefined> {
    return this.get(id);
  }

  /** `delete` for the routes that may ask another process (DELETE /v1/responses/{id}). */
  async remove(id: string): Promise<boolean> {
    return this.delete(id);
  }

  /** Forget response `id` and its items; returns whether it was stored. */
  delete(id: string): boolean {
    const entry = this.responses.get(id);
    if (entry === undefined) return false;
    this.responses.delete(id);
    this.bytes -= entry.bytes;
    for (const itemId of entry.itemIds) if (this.items.get(itemId)?.responseId === id) this.items.delete(itemId);
    return true;
  }
}
