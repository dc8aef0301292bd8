/**
 * Per-tenant budgets (issue 30 part 4): requests per minute and tokens per minute (prompt + completion), as a token
 * bucket per tenant and kind that refills continuously at its limit per minute up to the limit (how OpenAI describes
 * its own rate limits: a limit of 60 per minute lets one request through every second once the bucket is empty).
 *
 * Charging. A request takes one request, its prompt tokens and a reservation of its `max_tokens` when it is admitted
 * (`admit`), and gives back the part of the reservation it did not generate when it ends (`BudgetCharge.settle`), so
 * the bucket never goes below zero however many requests run at once (OpenAI also counts `max_tokens` at admission).
 * A request that never reached a rank (flow control refused it, no rank could serve it, its client left while it
 * waited) gets everything back (`refund`). With n > 1 only the first sub-request is charged a request and the prompt
 * (the `usage` object counts the prompt once); each sub-request reserves its own `max_tokens`.
 *
 * Admission needs one request left and the tokens it takes. A request whose prompt and reservation exceed the whole
 * per-minute token budget can never pass; it is refused without a retry time (ask for fewer `max_tokens`).
 *
 * State: one account per tenant with a budget (the keys file names them, so their number is bounded by it); an
 * account back at full is the same as a fresh one, so accounts beyond `MAX_ACCOUNTS` are pruned when full (at most
 * once per doubling of the count, so a flood of new tenants costs amortized O(1) each). Pure state with an injected
 * clock: no timers, no I/O. The limits come with each request (`FlowTicket.budget`), so a keys file reload applies
 * from the tenant's next request; a lower limit clamps what is left to it.
 */
import { EngineClientError } from './errors.js';

/** A tenant's limits (per minute; null: no limit of that kind). */
export interface BudgetLimits {
  readonly requestsPerMinute: number | null;
  readonly tokensPerMinute: number | null;
}

/** One limit's state, as OpenAI's `x-ratelimit-*` headers give it: the limit, what is left, ms until full again. */
export interface LimitState {
  readonly limit: number;
  readonly remaining: number;
  readonly resetMs: number;
}

/** What a tenant's budget looks like after an admission or a refusal (null: that kind is not limited). */
export interface BudgetSnapshot {
  readonly requests: LimitState | null;
  readonly tokens: LimitState | null;
}

/** Which limit refused a request: OpenAI's error `type` for a rate limit (`requests` or `tokens`). */
export type LimitKind = 'requests' | 'tokens';

/** What an admitted request holds: it settles its reservation when it ends, or gives its admission back. */
export interface BudgetCharge {
  /** The tenant's budget right after this admission (what the response's `x-ratelimit-*` headers say). */
  readonly snapshot: BudgetSnapshot;
  /** The request ended having generated `completionTokens`: give back the rest of its reservation (once). */
  settle(completionTokens: number): void;
  /** Give back all it took: the request, the prompt and what is left of its reservation (once; it never ran). */
  refund(): void;
}

/** Accounts kept before the full ones are pruned (see the module comment). */
export const MAX_ACCOUNTS = 10_000;

const MS_PER_MINUTE = 60_000;

/** A continuously refilling bucket of at most `capacity` units, `capacity` per minute. */
class Bucket {
  level: number;
  capacity: number;
  private at: number;

  constructor(capacity: number, now: number) {
    this.capacity = capacity;
    this.level = capacity;
    this.at = now;
  }

  /** Bring the level to `now` under the limit `capacity` (a lowered limit clamps the level). */
  refill(capacity: number, now: number): void {
    const elapsed = Math.max(0, now - this.at);
    this.at = now;
    this.capacity = capacity;
    this.level = Math.min(capacity, this.level + (elapsed * capacity) / MS_PER_MINUTE);
  }

  /** ms until the level reaches `need` (0 when it has). */
  msUntil(need: number): number {
    return this.level >= need ? 0 : Math.ceil(((need - this.level) * MS_PER_MINUTE) / this.capacity);
  }

  state(): LimitState {
    return {
      limit: this.capacity,
      remaining: Math.max(0, Math.floor(this.level)),
      resetMs: this.msUntil(this.capacity),
    };
  }

  get full(): boolean {
    return this.level >= this.capacity;
  }
}

interface Account {
  requests: Bucket | null;
  tokens: Bucket | null;
}

/** Whether `v` is a usable per-minute limit: an integer ≥ 1. */
export function isBudgetLimit(v: unknown): v is number {
  return typeof v === 'number' && Number.isSafeInteger(v) && v >= 1;
}

/**
 * The budgets of every tenant (one per gateway: every engine group's client shares it, so a tenant's budget spans
 * the groups). `now` is the clock (ms; default `performance.now`-like, injected by tests).
 */
export class BudgetLedger {
  private readonly accounts = new Map<string, Account>();
  /** Prune when the account count reaches this (see the module comment). */
  private pruneAt = MAX_ACCOUNTS;
  /** Scans for full accounts so far (each visits every account). */
  private pruneCount = 0;
  /** Requests refused, per limit kind (all counters, never reset). */
  readonly refusals: Record<LimitKind, number> = { requests: 0, tokens: 0 };

  constructor(private readonly now: () => number) {}

  /** How many times the accounts were scanned for full ones (see the module comment: once per doubling). */
  get prunes(): number {
    return this.pruneCount;
  }

  /** Tenants with an account now (bounded, see the module comment). */
  get size(): number {
    return this.accounts.size;
  }

  /**
   * Admit one request of `tenant` under `limits`: when `lead`, take one request and `promptTokens`; take
   * `reserveTokens` (its `max_tokens`) in any case. Returns the charge, or null when `limits` limits nothing.
   * @throws EngineClientError `rate-limited` (HTTP 429; fields `retryAfterMs` when waiting can help, and
   *   `rateLimits`, the snapshot as `snapshotNumbers`) when the tenant's budget cannot take it; nothing is taken then.
   */
  admit(
    tenant: string,
    limits: BudgetLimits,
    promptTokens: number,
    reserveTokens: number,
    lead = true,
  ): BudgetCharge | null {
    const rpm = limits.requestsPerMinute;
    const tpm = limits.tokensPerMinute;
    if (rpm === null && tpm === null) return null;
    const now = this.now();
    const account = this.account(tenant, rpm, tpm, now);
    const { requests, tokens } = account;
    requests?.refill(rpm!, now);
    tokens?.refill(tpm!, now);
    const prompt = lead ? promptTokens : 0;
    const need = prompt + Math.max(0, reserveTokens);
    if (lead && requests !== null && requests.level < 1) {
      throw this.refuse(tenant, 'requests', account, requests.msUntil(1), `${rpm} requests per minute`);
    }
    if (tokens !== null && (tokens.level < Math.max(1, need) || need > tokens.capacity)) {
      const never = need > tokens.capacity;
      const what = `${tpm} tokens per minute (this request takes ${prompt} prompt tokens and reserves its max_tokens, ${need - prompt})`;
      throw this.refuse(
        tenant,
        'tokens',
        account,
        never ? null : tokens.msUntil(Math.max(1, need)),
        never ? `${what}: more than the whole budget, it can never pass; ask for fewer max_tokens` : what,
      );
    }
    if (lead && requests !== null) requests.level -= 1;
    if (tokens !== null) tokens.level -= need;
    let admitted = lead && requests !== null;
    let reserved = tokens === null ? 0 : need - prompt;
    let promptHeld = tokens === null ? 0 : prompt;
    const giveTokens = (n: number) => {
      if (tokens !== null && n > 0) tokens.level = Math.min(tokens.capacity, tokens.level + n);
    };
    return {
      snapshot: snapshotOf(account),
      settle: (completionTokens: number) => {
        giveTokens(reserved - Math.min(reserved, Math.max(0, completionTokens)));
        reserved = 0;
      },
      refund: () => {
        if (admitted && requests !== null) requests.level = Math.min(requests.capacity, requests.level + 1);
        admitted = false;
        giveTokens(promptHeld + reserved);
        promptHeld = 0;
        reserved = 0;
      },
    };
  }

  private account(tenant: string, rpm: number | null, tpm: number | null, now: number): Account {
    let a = this.accounts.get(tenant);
    if (a === undefined) {
      if (this.accounts.size >= this.pruneAt) {
        this.prune(now);
        this.pruneAt = Math.max(MAX_ACCOUNTS, 2 * this.accounts.size);
      }
      a = { requests: null, tokens: null };
      this.accounts.set(tenant, a);
    }
    // A limit added or removed by a keys file reload: a new limit starts full, a removed one is dropped.
    if (rpm === null) a.requests = null;
    else a.requests ??= new Bucket(rpm, now);
    if (tpm === null) a.tokens = null;
    else a.tokens ??= new Bucket(tpm, now);
    return a;
  }

  /** Drop the accounts that are full again (the same as fresh ones). */
  private prune(now: number): void {
    this.pruneCount++;
    for (const [tenant, a] of this.accounts) {
      a.requests?.refill(a.requests.capacity, now);
      a.tokens?.refill(a.tokens.capacity, now);
      if ((a.requests?.full ?? true) && (a.tokens?.full ?? true)) this.accounts.delete(tenant);
    }
  }

  private refuse(
    tenant: string,
    kind: LimitKind,
    account: Account,
    retryAfterMs: number | null,
    what: string,
  ): EngineClientError {
    this.refusals[kind]++;
    const wait = retryAfterMs === null ? '' : `; retry after ${formatResetMs(retryAfterMs)}`;
    return new EngineClientError(
      'rate-limited',
      `tenant ${JSON.stringify(tenant)} reached its budget of ${what}${wait}`,
      {
        ...(retryAfterMs === null ? {} : { retryAfterMs }),
        rateLimits: snapshotNumbers(snapshotOf(account)),
      },
    );
  }
}

function snapshotOf(a: Account): BudgetSnapshot {
  return { requests: a.requests?.state() ?? null, tokens: a.tokens?.state() ?? null };
}

/**
 * A snapshot as six numbers (how it crosses the `--workers` channel and an error's fields): limit, remaining and
 * reset ms of requests, then of tokens; −1 for a kind that is not limited.
 */
export function snapshotNumbers(s: BudgetSnapshot): number[] {
  const part = (l: LimitState | null) => (l === null ? [-1, -1, -1] : [l.limit, l.remaining, l.resetMs]);
  return [...part(s.requests), ...part(s.tokens)];
}

/** The inverse of `snapshotNumbers`; null when `v` is not six numbers. */
export function snapshotFromNumbers(v: readonly number[]): BudgetSnapshot | null {
  if (v.length !== 6 || v.some((x) => typeof x !== 'number' || !Number.isFinite(x))) return null;
  const part = (i: number): LimitState | null =>
    v[i]! < 0 ? null : { limit: v[i]!, remaining: v[i + 1]!, resetMs: v[i + 2]! };
  return { requests: part(0), tokens: part(3) };
}

/**
 * A duration as OpenAI's `x-ratelimit-reset-*` headers write it: `17ms`, `1s`, `1.5s`, `6m0s`, `1m30.5s`
 * (`ms` ≥ 0).
 */
export function formatResetMs(ms: number): string {
  const t = Math.max(0, Math.ceil(ms));
  if (t < 1000) return `${t}ms`;
  const seconds = (s: number) => `${Number(s.toFixed(3))}s`;
  if (t < MS_PER_MINUTE) return seconds(t / 1000);
  return `${Math.floor(t / MS_PER_MINUTE)}m${seconds((t % MS_PER_MINUTE) / 1000)}`;
}
