/**
 * Submitting one HTTP request's engine sub-requests (n of them; gateway.md 10) to its group: each with the request's
 * flow ticket (tenant, band, budget, queue deadline; engine-client/flow-control.ts, budgets.ts), all in the same
 * tick so each is routed on its own (dp-routing.md 12.3), except under a budget: then the first goes alone and the
 * others only once it was admitted, so a refused tenant's siblings reach neither a rank nor flow control's queue
 * (where they could shed other tenants' requests). A refused sub-request ends its siblings at once (one still
 * waiting in the queue leaves it), and so does the client leaving.
 */
import { setMaxListeners } from 'node:events';
import type { CancelSignal, FlowTicket } from '../engine-client/client-options.js';
import type { BudgetLimits } from '../engine-client/budgets.js';
import type { GenerateRequest } from '../protocols/types.js';
import type { BackendStream, GenerationBackend } from './backend.js';
import { bandOrder, type PriorityBand } from './priority-band.js';

/** What a request says about itself to flow control and budgets (serve-generation.ts `PreparedRequest` has it). */
export interface TicketFields {
  tenant: string;
  band: PriorityBand;
  budget: BudgetLimits | null;
  /** The request's own queue deadline (ms), or null for the group's. */
  queueTimeoutMs: number | null;
}

/** The flow ticket of a request's first sub-request. */
export function flowTicketOf(f: TicketFields): FlowTicket {
  return {
    tenant: f.tenant,
    band: bandOrder(f.band),
    ...(f.budget === null ? {} : { budget: f.budget }),
    ...(f.queueTimeoutMs === null ? {} : { timeoutMs: f.queueTimeoutMs }),
  };
}

/**
 * Submit `subs` to `backend` with `ticket` (the second and later ones as not the lead: they take no request and no
 * prompt from the budget), pinned to `dpRank` when set, watching `leave` (the client's disconnect). Resolves with the
 * streams that were accepted and the first refusal (null when none); never rejects. The caller cancels the accepted
 * streams when there was a refusal.
 */
export async function submitSubRequests(
  backend: GenerationBackend,
  subs: readonly GenerateRequest[],
  opts: { dpRank: number | undefined; leave: CancelSignal; ticket: FlowTicket },
): Promise<{ streams: BackendStream[]; error: unknown }> {
  const { dpRank, ticket } = opts;
  const siblingTicket: FlowTicket = subs.length > 1 ? { ...ticket, lead: false } : ticket;
  const failFast = subs.length > 1 ? siblingsSignal(opts.leave, subs.length) : null;
  const signal = failFast?.signal ?? opts.leave;
  const submit = (r: GenerateRequest, i: number) =>
    backend.submit(r, { dpRank, signal, flow: i === 0 ? ticket : siblingTicket }).catch((err: unknown) => {
      failFast?.abort(err);
      throw err;
    });
  let settled: PromiseSettledResult<BackendStream>[];
  // Under a budget, or for embedding inputs (which follow their lead past flow control), the lead goes first alone.
  if ((ticket.budget !== undefined || subs[0]?.pooling !== undefined) && subs.length > 1) {
    settled = await Promise.allSettled([submit(subs[0]!, 0)]);
    if (settled[0]!.status === 'fulfilled')
      settled.push(...(await Promise.allSettled(subs.slice(1).map((r, i) => submit(r, i + 1)))));
  } else {
    settled = await Promise.allSettled(subs.map(submit));
  }
  const streams: BackendStream[] = [];
  let error: unknown = null;
  for (const s of settled) {
    if (s.status === 'fulfilled') streams.push(s.value);
    else error ??= s.reason;
  }
  return { streams, error };
}

/**
 * The signal of a request's n > 1 sub-requests: aborted when the client leaves (`leave` aborts) or, by its caller,
 * when one sub-request is refused, so the others do not wait on (flow control can hold a submit for seconds).
 */
function siblingsSignal(leave: CancelSignal, listeners: number): AbortController {
  const all = new AbortController();
  // Each sibling's submit listens on it (up to 2048 embedding inputs): not a leak, so no warning past the default 10.
  setMaxListeners(listeners + 10, all.signal);
  const onLeave = () => all.abort(leave.reason);
  if (leave.aborted) onLeave();
  else leave.addEventListener('abort', onLeave, { once: true });
  return all;
}
