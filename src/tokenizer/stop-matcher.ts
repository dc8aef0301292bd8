/**
 * Text-level stop-string matching over detokenized deltas (gateway.md section 6 "String stops"; vLLM #3574 and
 * SMG PR #2203 for the holdback rules). Pure: no I/O, no tokenizer; one instance per choice.
 *
 * Rules:
 * - a stop string may span any number of deltas (token boundaries are invisible here);
 * - while no stop string has matched, only the longest suffix of the not-yet-emitted text that is a **proper prefix**
 *   of some stop string is held back; everything before it is emitted at once;
 * - on a match, the earliest occurrence wins (ties: the longest stop string); no character of the matched stop string
 *   is ever emitted unless `includeStopStr` (vLLM's `include_stop_str_in_output`), and text after it is dropped;
 * - after a match the matcher is finished: further input is ignored (emits nothing);
 * - `flush()` releases the held-back text at the end of the choice (it goes through the same path as any delta);
 * - text pushed with `matchable: false` (the text of the first `min_tokens` tokens) cannot **end** a match: a stop
 *   string lying wholly inside it is ordinary text and is emitted; one that starts inside it and ends in later text
 *   still matches. This is vLLM's frontend rule (v1 `detokenizer.py` `BaseIncrementalDetokenizer.update`, PR #22014:
 *   `stop_check_offset` moves past the text of every token up to `min_tokens`, and `check_stop_strings` only accepts
 *   a match that ends after that offset). Holdback is unchanged, since such text can still begin a match.
 */

/** Result of feeding one text delta: `emit` is safe to send now; `matched` is the stop string that ended the text. */
export interface StopMatchResult {
  emit: string;
  /** The stop string that matched (the choice then finishes with `stop`), or null while none has. */
  matched: string | null;
}

/** Options of one `StopStringMatcher.push`. */
export interface StopPushOptions {
  /** False: no match may end inside this text (see the module comment; vLLM's `min_tokens` rule). Default true. */
  matchable?: boolean;
}

/** Options of a `StopStringMatcher`. */
export interface StopMatcherOptions {
  /** Emit the matched stop string itself (vLLM `include_stop_str_in_output`); default false. */
  includeStopStr?: boolean;
}

/**
 * Incremental matcher of a fixed set of stop strings. Throws `RangeError` at construction when a stop string is
 * empty (the HTTP layer refuses those with 400 first).
 */
export class StopStringMatcher {
  private readonly stops: readonly string[];
  private readonly includeStopStr: boolean;
  /** Text received but not yet emitted (always a proper prefix candidate of some stop string, or ''). */
  private held = '';
  /** How many leading UTF-16 units of `held` came from unmatchable text (a match must end after them). */
  private heldLocked = 0;
  private matchedStop: string | null = null;

  constructor(stops: readonly string[], options: StopMatcherOptions = {}) {
    for (const s of stops) if (s.length === 0) throw new RangeError('stop strings must not be empty');
    this.stops = [...new Set(stops)];
    this.includeStopStr = options.includeStopStr === true;
  }

  /** True when there is no stop string (every delta passes through unchanged). */
  get empty(): boolean {
    return this.stops.length === 0;
  }

  /** The stop string that matched, or null. */
  get matched(): string | null {
    return this.matchedStop;
  }

  /** Feed one detokenized text delta (complete characters); `options.matchable` false for text that may not end a match. */
  push(text: string, options: StopPushOptions = {}): StopMatchResult {
    if (this.matchedStop !== null) return { emit: '', matched: this.matchedStop };
    if (this.stops.length === 0) return { emit: text, matched: null };
    const buf = this.held + text;
    if (options.matchable === false) {
      const hold = this.longestPrefixSuffix(buf);
      this.held = buf.slice(buf.length - hold);
      this.heldLocked = this.held.length;
      return { emit: buf.slice(0, buf.length - hold), matched: null };
    }
    let bestAt = -1;
    let best: string | null = null;
    for (const s of this.stops) {
      // Only occurrences that end after the unmatchable prefix count.
      const at = buf.indexOf(s, Math.max(0, this.heldLocked - s.length + 1));
      if (at < 0) continue;
      if (bestAt < 0 || at < bestAt || (at === bestAt && s.length > best!.length)) {
        bestAt = at;
        best = s;
      }
    }
    if (best !== null) {
      this.matchedStop = best;
      this.held = '';
      this.heldLocked = 0;
      return { emit: buf.slice(0, bestAt) + (this.includeStopStr ? best : ''), matched: best };
    }
    const hold = this.longestPrefixSuffix(buf);
    const emitted = buf.length - hold;
    this.held = buf.slice(emitted);
    this.heldLocked = Math.max(0, this.heldLocked - emitted);
    return { emit: buf.slice(0, emitted), matched: null };
  }

  /** End of the choice without a match: return the held-back text (empty after a match). */
  flush(): string {
    const rest = this.held;
    this.held = '';
    this.heldLocked = 0;
    return this.matchedStop === null ? rest : '';
  }

  /** Length (UTF-16 units) of the longest suffix of `buf` that is a proper prefix of some stop string. */
  private longestPrefixSuffix(buf: string): number {
    let longest = 0;
    for (const s of this.stops) {
      const max = Math.min(s.length - 1, buf.length);
      for (let len = max; len > longest; len--) {
        if (buf.endsWith(s.slice(0, len))) {
          longest = len;
          break;
        }
      }
    }
    return longest;
  }
}
