/**
 * Where a DP rank publishes its KV events (docs/reference/kv-events.md 2). An engine is started with
 * one events endpoint and one optional replay endpoint for all its ranks; each rank's publisher offsets both by its
 * DP rank (vLLM `vllm/distributed/kv_events.py` and TokenSpeed `tokenspeed/runtime/pd/kv_events.py`
 * `offset_endpoint_port`, the same code in both), and binds where the configured string says to bind (`*`).
 *
 * Pure; no I/O.
 */

/** Why an endpoint cannot be offset for a rank: the engine itself fails to start with it. */
export class KvEventsEndpointError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'KvEventsEndpointError';
  }
}

/**
 * The endpoint rank `rank` (an integer ≥ 0) of an engine started with `endpoint` uses, as the engines derive it: rank
 * 0 unchanged; `inproc` endpoints get `_dp<rank>` appended; `tcp` endpoints get the rank added to the port after the
 * last `:`; anything else with rank > 0, and a `tcp` endpoint with no port, is refused, as the engine refuses it at
 * start. `tcp://*:5557` for rank 3 is `tcp://*:5560`; `tcp://[::1]:5557` for rank 1 is `tcp://[::1]:5558`.
 * @throws KvEventsEndpointError for an endpoint the engine refuses for this rank (`ipc://…` with rank > 0, `tcp://host`
 *   with no port), or a port past 65535 once offset (the rank's bind would fail).
 * @throws RangeError when `rank` is not an integer ≥ 0.
 */
export function offsetEndpointForRank(endpoint: string, rank: number): string {
  if (!Number.isInteger(rank) || rank < 0) throw new RangeError(`DP rank must be an integer ≥ 0, got ${rank}`);
  if (rank === 0 || endpoint === '') return endpoint;
  if (endpoint.includes('inproc')) return `${endpoint}_dp${rank}`;
  if (endpoint.includes('tcp')) {
    // The engines read the text after the last ':' as an integer port; without one (`tcp://host`, whose last ':' is
    // the scheme's) their int() fails and the engine does not start.
    const colon = endpoint.lastIndexOf(':');
    const port = endpoint.slice(colon + 1);
    if (!/^\d+$/.test(port)) {
      throw new KvEventsEndpointError(
        `KV-events endpoint ${JSON.stringify(endpoint)} has no port to offset for DP rank ${rank}`,
      );
    }
    const offset = Number(port) + rank;
    if (offset > 65_535) {
      throw new KvEventsEndpointError(
        `KV-events endpoint ${JSON.stringify(endpoint)} offset for DP rank ${rank} is port ${offset}, past 65535`,
      );
    }
    return `${endpoint.slice(0, colon + 1)}${offset}`;
  }
  throw new KvEventsEndpointError(
    `KV-events endpoint ${JSON.stringify(endpoint)} cannot be offset for DP rank ${rank}: ` +
      "the engines accept only endpoints containing 'inproc' or 'tcp' when DP > 1",
  );
}

/**
 * The address a subscriber on `host` dials for a rank's endpoint: a wildcard host (`*`) the engine bound on becomes
 * `host`; any other endpoint is dialled as it is.
 */
export function dialAddress(rankEndpoint: string, host: string): string {
  return rankEndpoint.replace('://*:', `://${host}:`);
}

/** How a group's engines were started for KV events: the endpoints as configured (before the per-rank offset). */
export interface KvEventsEndpointConfig {
  /** The events endpoint (`tcp://*:5557`, the engines' default). */
  readonly endpoint: string;
  /** The replay endpoint, or null when the engines have none. */
  readonly replayEndpoint: string | null;
  /** The host the gateway dials a wildcard endpoint on. */
  readonly host: string;
}

/** The addresses the gateway dials for one rank. */
export interface RankKvEventAddresses {
  readonly events: string;
  readonly replay: string | null;
}

/**
 * The addresses to dial for each of `dpSize` ranks (engine indexes 0..dpSize-1) of a group started with `config`.
 * @throws KvEventsEndpointError when an endpoint cannot be offset for a rank (the engines would not start), or when
 *   two ranks' sockets would share one address (the replay range overlapping the events range, docs/reference/kv-events.md
 *   2: the second bind fails in the engine).
 * @throws RangeError when `dpSize` is not an integer ≥ 1.
 */
export function kvEventAddresses(config: KvEventsEndpointConfig, dpSize: number): RankKvEventAddresses[] {
  if (!Number.isInteger(dpSize) || dpSize < 1) throw new RangeError(`DP size must be an integer ≥ 1, got ${dpSize}`);
  const out: RankKvEventAddresses[] = [];
  const seen = new Map<string, string>();
  const claim = (address: string, what: string): string => {
    const other = seen.get(address);
    if (other !== undefined) {
      throw new KvEventsEndpointError(
        `${what} and ${other} are both ${address}: move the replay endpoint's port range`,
      );
    }
    seen.set(address, what);
    return address;
  };
  for (let rank = 0; rank < dpSize; rank++) {
    const events = claim(
      dialAddress(offsetEndpointForRank(config.endpoint, rank), config.host),
      `rank ${rank}'s events`,
    );
    const replay =
      config.replayEndpoint === null
        ? null
        : claim(dialAddress(offsetEndpointForRank(config.replayEndpoint, rank), config.host), `rank ${rank}'s replay`);
    out.push({ events, replay });
  }
  return out;
}
