/**
 * Which `EngineCoreOutput` layout each vLLM rank sends (docs/wire/vllm-output.md): 13 fields (vLLM 9aaf83ef /
 * 52a31cce) or 16 (SMG's decoder, engine-wire.md 5.9). Decided once per rank process, from the first of:
 * 1. the ready response's `vllm_version`, when it names a vLLM build whose layout is known (`outputLayoutOfVersion`);
 * 2. the shape of the rank's first output message that shows one (`detectOutputLayout` in output.ts).
 * A rank whose outputs are all ambiguous stays undecided; its messages are decoded in the layout that reads every
 * ambiguous output the same (output.ts `decodeEngineCoreOutputs`).
 *
 * The memory is keyed by engine index and bounded: indices above 65535 (no ZMQ identity can name one, engine-wire.md
 * 1.5) are never remembered. A rank that (re)joins starts undecided: a new process may be another vLLM build.
 */
import type { EngineCoreOutputLayout, OutputLayoutEvidence } from './output.js';

/** Where a rank's layout decision came from. */
export type OutputLayoutSource = 'ready-response' | 'shape';

/** One decision, as reported to `OutputLayouts`' listener (the gateway logs it). */
export interface OutputLayoutDecision {
  engineIndex: number;
  layout: EngineCoreOutputLayout;
  source: OutputLayoutSource;
  /** Why: the version string and the commit it names, or the element of the output that showed the layout. */
  reason: string;
}

/**
 * vLLM commits whose `EngineCoreOutput` layout is known from the real encoders (test/vectors/vllm, README there).
 * Full hashes; a version names one by a prefix of at least 7 hex digits.
 */
export const KNOWN_VLLM_COMMIT_LAYOUTS: ReadonlyArray<{ commit: string; layout: EngineCoreOutputLayout }> =
  Object.freeze([
    { commit: '9aaf83ef502fc37bc647f6e474314d48ba36cd1c', layout: 13 },
    { commit: '52a31ccecca203effd490a5b496dc5f8d9496654', layout: 13 },
  ]);

/** A setuptools-scm local version segment naming a commit: `+g<hash>` or `.g<hash>` (e.g. `0.21.1.dev3+g52a31ccec`). */
const COMMIT_IN_VERSION = /[+.]g([0-9a-f]{7,40})(?![0-9a-f])/i;

/**
 * The layout a ready response's `vllm_version` names, or null when it names none this gateway knows (then the
 * outputs' shape decides). vLLM builds from a git tree report their commit in the version's local segment
 * (setuptools-scm: `0.21.1.dev325+g52a31ccec.d20260527`); a commit of `KNOWN_VLLM_COMMIT_LAYOUTS` decides. Release
 * numbers alone decide nothing: which releases carry which layout is not pinned down (docs/wire/vllm-output.md).
 * Pure.
 */
export function outputLayoutOfVersion(
  version: string | null | undefined,
): { layout: EngineCoreOutputLayout; reason: string } | null {
  if (typeof version !== 'string' || version === '') return null;
  const m = COMMIT_IN_VERSION.exec(version);
  if (m === null) return null;
  const hash = m[1]!.toLowerCase();
  const known = KNOWN_VLLM_COMMIT_LAYOUTS.find((k) => k.commit.startsWith(hash));
  if (known === undefined) return null;
  return { layout: known.layout, reason: `vllm_version '${version}' names vLLM commit ${known.commit.slice(0, 8)}` };
}

/** The highest engine index a ZMQ identity can carry (2 bytes, engine-wire.md 1.5): the memory's bound. */
const MAX_ENGINE_INDEX = 0xffff;

/**
 * The per-rank layout memory of one engine group's vLLM protocol instance. Synchronous and small: one map entry per
 * decided rank (≤ 65536). `onDecision` hears every decision once, when it is made.
 */
export class OutputLayouts {
  private readonly decided = new Map<number, EngineCoreOutputLayout>();

  constructor(private readonly onDecision?: (d: OutputLayoutDecision) => void) {}

  /** The layout rank `engineIndex` sends, or undefined while undecided. */
  of(engineIndex: number): EngineCoreOutputLayout | undefined {
    return this.decided.get(engineIndex);
  }

  /**
   * Rank `engineIndex` (re)joined with a ready response reporting `vllmVersion` (null: not reported): forget the
   * previous process's layout, then decide from the version when it names one.
   */
  noteJoined(engineIndex: number, vllmVersion: string | null): void {
    this.decided.delete(engineIndex);
    const known = outputLayoutOfVersion(vllmVersion);
    if (known !== null) this.decide(engineIndex, known.layout, 'ready-response', known.reason);
  }

  /** Record what a decoded output message's shape showed for an undecided rank (no-op once decided). */
  noteShape(engineIndex: number, evidence: OutputLayoutEvidence): void {
    if (this.decided.has(engineIndex)) return;
    this.decide(engineIndex, evidence.layout, 'shape', evidence.reason);
  }

  private decide(
    engineIndex: number,
    layout: EngineCoreOutputLayout,
    source: OutputLayoutSource,
    reason: string,
  ): void {
    if (!Number.isSafeInteger(engineIndex) || engineIndex < 0 || engineIndex > MAX_ENGINE_INDEX) return;
    this.decided.set(engineIndex, layout);
    this.onDecision?.({ engineIndex, layout, source, reason });
  }
}
