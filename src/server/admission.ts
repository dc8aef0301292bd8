/**
 * The admission gate the HTTP layer consults before it takes a new request (issue #8 part 6, graceful drain). The
 * state lives in the gateway's lifecycle (src/lifecycle.ts), next to the engine groups it drains, not in the routes:
 * the app only asks `draining`.
 */

/** What the app reads: `draining` = a shutdown began; new generation requests get 503 and `/ready` turns 503. */
export interface AdmissionGate {
  readonly draining: boolean;
}

/** A gate that is always open (an app without a lifecycle, e.g. in tests). */
export const OPEN_GATE: AdmissionGate = Object.freeze({ draining: false });
