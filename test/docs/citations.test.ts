/**
 * Every reference citation in the repository resolves to a section of a document in the repository (issue 27 part 1:
 * the repository must not depend on ../shared).
 *
 * Code comments cite the reference documents as `<name>.md [section|sections] N[.N]`, possibly a list or a range
 * (`4.8, 5.9`, `2.1-2.3`, `sections 2, 3 and 16`), possibly wrapped over a comment line break, and sometimes followed by
 * a quoted label that names a part of that section (`gateway.md 12 "Mid-stream errors"`). The names are those of
 * docs/reference/ (engine-wire, dp-routing, gateway, kv-events). Whatever path
 * precedes the name (`../shared/spec/`, `docs/reference/`) the section must exist in docs/reference/<name>.md as a
 * heading `## N.` or `### N.N`, and a quoted label must occur in that section's text.
 *
 * The architecture sketch is cited by quoted heading or term (`architecture.md "The seams"`), answered by
 * docs/reference/architecture.md; the multi-process design is cited by number (`docs/workers.md section 6`), answered
 * by docs/workers.md; a numbered `architecture.md` citation would name the map (docs/architecture.md), which has no
 * numbered sections, and fails.
 *
 * Scanned: src/, test/, bench/, docs/ (the reference documents' own cross-references included) and the top-level
 * Markdown files; node_modules, generated results and this file (whose examples are fixtures) are skipped.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

/** This file without its extension: its own examples are fixtures, as .ts or transpiled .js (scripts/test-build.mjs). */
const SELF = fileURLToPath(import.meta.url).replace(/\.[jt]s$/, '');
const ROOT = join(dirname(SELF), '..', '..');
const REFERENCE_DIR = join(ROOT, 'docs', 'reference');
const MULTI_PROCESS_DOC = join(ROOT, 'docs', 'workers.md');
const MAP_DOC = join(ROOT, 'docs', 'architecture.md');
const SCANNED_DIRS = ['src', 'test', 'bench', 'docs'];
const SCANNED_FILE = /\.(?:ts|mts|cts|js|mjs|cjs|md)$/;
const SKIPPED_DIRS = new Set(['node_modules', 'results', '.git']);

/** The reference documents a numbered citation may name. */
const NAMES = ['engine-wire', 'dp-routing', 'gateway', 'kv-events'] as const;

/** One whitespace unit of a citation; it may cross a line break plus the next line's comment leader. */
const WS = String.raw`(?:[ \t]|\r?\n[ \t]*(?:\*(?!\/)|\/\/|#)?[ \t]*)`;
/** A section number, not the start of a longer token (`12.3` in `12.3x` is no number). */
const NUM = String.raw`\d+(?:\.\d+)*(?![\w]|\.\d)`;
const KEYWORD = String.raw`(?:(?:sections?|§)${WS}*)`;
const LIST = String.raw`${NUM}(?:${WS}*(?:,|and|&|\/|-|–|to)${WS}*${KEYWORD}?${NUM})*`;
/** After the name: a closing backtick or quote, or a Markdown link target `](…)`. */
const NAME_END = String.raw`(?:[\`'"]|\]\([^)\s]*\))?`;
const LABEL = String.raw`(?:,?[ \t]*"([^"\n]{1,100})")?`;

const NUMBERED = new RegExp(
  String.raw`(?<![\w.-])((?:[\w.-]*\/)*)(${NAMES.join('|')})\.md${NAME_END}(?:${WS}*${KEYWORD}?(${LIST})${LABEL})?`,
  'g',
);
const ARCHITECTURE = new RegExp(
  String.raw`(?<![\w.-])((?:[\w.-]*\/)*)(architecture|workers)\.md${NAME_END}(?:${WS}*(?:\(${WS}*)?"([^"\n]{1,100})"|${WS}*${KEYWORD}?(${LIST}))?`,
  'g',
);

/** One citation found in a file. */
export interface Citation {
  file: string;
  line: number;
  text: string;
  doc: string;
  sections: string[];
  label: string | null;
}

/** The sections a number list names: `2.1-2.3` → 2.1, 2.2, 2.3; `4, 5 and 7` → 4, 5, 7; other ranges → both ends. */
export function expandSections(list: string): string[] {
  const flat = list.replace(/\r?\n[ \t]*(?:\*(?!\/)|\/\/|#)?/g, ' ');
  const out: string[] = [];
  const re = new RegExp(String.raw`(${NUM})(?:\s*[-–]\s*(?:sections?\s*)?(${NUM}))?`, 'g');
  for (const m of flat.matchAll(re)) {
    const a = m[1];
    const b = m[2];
    if (b === undefined) {
      out.push(a);
      continue;
    }
    const pa = a.split('.');
    const pb = b.split('.');
    const lastA = Number(pa[pa.length - 1]);
    const lastB = Number(pb[pb.length - 1]);
    if (
      pa.length === pb.length &&
      pa.slice(0, -1).join('.') === pb.slice(0, -1).join('.') &&
      lastB >= lastA &&
      lastB - lastA <= 50
    ) {
      for (let i = lastA; i <= lastB; i++) out.push([...pa.slice(0, -1), String(i)].join('.'));
    } else {
      out.push(a, b);
    }
  }
  return out;
}

function lineOf(text: string, index: number): number {
  let line = 1;
  for (let i = 0; i < index; i++) if (text.charCodeAt(i) === 10) line++;
  return line;
}

/** Every numbered reference citation in `text` (a file's content; `file` names it in the result). Pure. */
export function findCitations(text: string, file: string): Citation[] {
  const out: Citation[] = [];
  for (const m of text.matchAll(NUMBERED)) {
    out.push({
      file,
      line: lineOf(text, m.index),
      text: m[0].replace(/\s+/g, ' ').trim(),
      doc: `${m[2]}.md`,
      sections: m[3] === undefined ? [] : expandSections(m[3]),
      label: m[4] ?? null,
    });
  }
  for (const m of text.matchAll(ARCHITECTURE)) {
    const workers = m[2] === 'workers';
    const numbered = m[4] !== undefined;
    if (!numbered && (workers || m[3] === undefined)) continue;
    out.push({
      file,
      line: lineOf(text, m.index),
      text: m[0].replace(/\s+/g, ' ').trim(),
      // The architecture sketch is cited by heading; the multi-process design by number.
      doc: workers ? 'docs/workers.md' : numbered ? 'docs/architecture.md' : 'architecture.md',
      sections: numbered ? expandSections(m[4]) : [],
      label: numbered ? null : m[3],
    });
  }
  return out;
}

/** A document's sections: number → the section's text (its heading and everything up to the next heading of its level or above). */
export function sectionsOf(markdown: string): Map<string, string> {
  const lines = markdown.split('\n');
  const heads: Array<{ at: number; level: number; num: string | null }> = [];
  let fence = false;
  lines.forEach((l, at) => {
    if (/^\s*```/.test(l)) fence = !fence;
    const m = fence ? null : /^(#{1,6})\s+(?:(\d+(?:\.\d+)*)\.?\s)?/.exec(l);
    if (m) heads.push({ at, level: m[1].length, num: m[2] ?? null });
  });
  const out = new Map<string, string>();
  heads.forEach((h, i) => {
    if (h.num === null) return;
    let end = lines.length;
    for (const next of heads.slice(i + 1)) {
      if (next.level <= h.level) {
        end = next.at;
        break;
      }
    }
    out.set(h.num, lines.slice(h.at, end).join('\n'));
  });
  return out;
}

/** Text as a reader sees it: no Markdown emphasis or code marks, whitespace collapsed, lower case. */
const plain = (s: string) => s.replace(/[`*_]/g, '').replace(/\s+/g, ' ').toLowerCase();

/** What is wrong with `c`, or null when it resolves. `docs` maps a document key to its text (absent: missing). */
export function checkCitation(c: Citation, docs: ReadonlyMap<string, string | undefined>): string | null {
  const where = c.doc.startsWith('docs/') ? c.doc : `docs/reference/${c.doc}`;
  const body = docs.get(c.doc);
  if (body === undefined) return `${where} does not exist`;
  if (c.doc === 'architecture.md') {
    return c.label !== null && !plain(body).includes(plain(c.label)) ? `${where} does not mention "${c.label}"` : null;
  }
  const sections = sectionsOf(body);
  const missing = c.sections.filter((s) => !sections.has(s));
  if (missing.length > 0) return `${where} has no section ${missing.join(', ')}`;
  if (c.label !== null && c.sections.length > 0) {
    const last = c.sections[c.sections.length - 1];
    if (!plain(sections.get(last)!).includes(plain(c.label)))
      return `section ${last} of ${where} does not mention "${c.label}"`;
  }
  return null;
}

function* walk(dir: string): Generator<string> {
  for (const entry of readdirSync(dir)) {
    if (SKIPPED_DIRS.has(entry)) continue;
    const path = join(dir, entry);
    const st = statSync(path);
    if (st.isDirectory()) yield* walk(path);
    else if (!SCANNED_FILE.test(entry) || path.replace(/\.[jt]s$/, '') === SELF) continue;
    // A .js beside its .ts is the transpiled copy npm test runs (scripts/test-build.mjs): the .ts has the comments.
    else if (!(entry.endsWith('.js') && existsSync(path.slice(0, -3) + '.ts'))) yield path;
  }
}

function scannedFiles(): string[] {
  const files: string[] = [];
  for (const d of SCANNED_DIRS) if (existsSync(join(ROOT, d))) files.push(...walk(join(ROOT, d)));
  for (const entry of readdirSync(ROOT)) if (entry.endsWith('.md')) files.push(join(ROOT, entry));
  return files;
}

function loadDocs(): Map<string, string | undefined> {
  const docs = new Map<string, string | undefined>();
  for (const name of [...NAMES, 'architecture']) {
    const path = join(REFERENCE_DIR, `${name}.md`);
    docs.set(`${name}.md`, existsSync(path) ? readFileSync(path, 'utf8') : undefined);
  }
  docs.set('docs/workers.md', existsSync(MULTI_PROCESS_DOC) ? readFileSync(MULTI_PROCESS_DOC, 'utf8') : undefined);
  docs.set('docs/architecture.md', existsSync(MAP_DOC) ? readFileSync(MAP_DOC, 'utf8') : undefined);
  return docs;
}

test('the citation parser reads lists, ranges, wrapped lines, link forms and labels', () => {
  const text = [
    '/** See engine-wire.md 4.8, 5.9 and dp-routing.md sections 9.2, 10.2-10.4; gateway.md section',
    ' * 12 "Mid-stream errors". Also `../shared/spec/gateway.md` 2.1-2.3 and [engine-wire.md](engine-wire.md) 1.5.',
    ' * Bare: dp-routing.md; not a number: gateway.md 9.2, vLLM #40302; kv-events.md 2.1.',
    ' * architecture.md "The seams", docs/workers.md sections 3-6, engine-wire.md 12.3x. */',
  ].join('\n');
  const got = findCitations(text, 'x.ts').map((c) => `${c.line}|${c.doc}|${c.sections.join(' ')}|${c.label ?? ''}`);
  assert.deepEqual(got, [
    '1|engine-wire.md|4.8 5.9|',
    '1|dp-routing.md|9.2 10.2 10.3 10.4|',
    '1|gateway.md|12|Mid-stream errors',
    '2|gateway.md|2.1 2.2 2.3|',
    '2|engine-wire.md|1.5|',
    '3|dp-routing.md||',
    '3|gateway.md|9.2|',
    '3|kv-events.md|2.1|',
    '4|engine-wire.md||',
    '4|architecture.md||The seams',
    '4|docs/workers.md|3 4 5 6|',
  ]);
});

test('a citation of a missing section, a missing document or an absent label is reported', () => {
  const doc =
    '# T\n\n## 1. One\n\n### 1.2 Sub\n\nThe **Engine order** rule.\n\n## 2. Two\n\n```\n## 3. not a heading\n```\n';
  const docs = new Map<string, string | undefined>([
    ['engine-wire.md', doc],
    ['kv-events.md', undefined],
  ]);
  const check = (text: string) => findCitations(text, 'x.ts').map((c) => checkCitation(c, docs));
  assert.deepEqual(check('engine-wire.md 1, 1.2, 2'), [null]);
  assert.deepEqual(check('engine-wire.md 1.2 "Engine order"'), [null]);
  assert.deepEqual(
    check('engine-wire.md 1 "engine ORDER"'),
    [null],
    'a label may sit in a subsection of the cited section',
  );
  assert.deepEqual(check('engine-wire.md 1.3'), ['docs/reference/engine-wire.md has no section 1.3']);
  assert.deepEqual(
    check('engine-wire.md 3'),
    ['docs/reference/engine-wire.md has no section 3'],
    'headings in code fences do not count',
  );
  assert.deepEqual(check('engine-wire.md 2 "Engine order"'), [
    'section 2 of docs/reference/engine-wire.md does not mention "Engine order"',
  ]);
  assert.deepEqual(check('kv-events.md 1.1'), ['docs/reference/kv-events.md does not exist']);
});

test('every reference citation in the repository resolves to a section of a document in the repository', () => {
  const docs = loadDocs();
  const citations = scannedFiles().flatMap((f) => findCitations(readFileSync(f, 'utf8'), relative(ROOT, f)));
  const numbered = citations.filter((c) => c.sections.length > 0);
  // The scan must see the code's citations at all (hundreds of them), or this test would pass by finding nothing.
  assert.ok(numbered.length > 300, `only ${numbered.length} numbered citations found: is the scanner broken?`);
  const problems = citations.flatMap((c) => {
    const problem = checkCitation(c, docs);
    return problem === null ? [] : [`${c.file}:${c.line}: ${c.text} → ${problem}`];
  });
  assert.deepEqual(problems, [], `${problems.length} citation(s) do not resolve:\n${problems.join('\n')}`);
});
