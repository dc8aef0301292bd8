/**
 * The README stays short and every documentation link resolves (issue 27 part 3).
 *
 * - README.md is at most 12 KiB (12 288 bytes): reference material belongs in docs/.
 * - Every relative Markdown link in README.md, CONTRIBUTING.md and docs/**\/*.md points to a file or folder that
 *   exists; a `#anchor` into a Markdown file (or into the same file) names a heading there, slugged as GitHub does, or
 *   an explicit `id`/`name` anchor.
 * - Every page under docs/ is linked from README.md, except the reference pages in docs/reference/, which may be
 *   linked from docs/reference/README.md instead (that index itself is linked from README.md).
 *
 * Links inside fenced code blocks and inline code are not links. Absolute URLs (`http:`, `https:`, `mailto:`) are not
 * checked: the suite runs offline.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const README = join(ROOT, 'README.md');
const DOCS = join(ROOT, 'docs');
const REFERENCE = join(DOCS, 'reference');
/** Issue 27 part 3: "A README that fits on a few screens (≤ 12 KB)". */
export const README_MAX_BYTES = 12_288;

/** One link found in a Markdown file: its target as written and the line it is on. */
export interface MarkdownLink {
  target: string;
  line: number;
}

/** The text with fenced code blocks and inline code spans blanked out (line breaks kept, so line numbers hold). Pure. */
export function stripCode(markdown: string): string {
  const lines = markdown.split('\n');
  let fence: string | null = null;
  const out = lines.map((l) => {
    const m = /^\s{0,3}(`{3,}|~{3,})/.exec(l);
    if (fence !== null) {
      if (m !== null && m[1]![0] === fence[0] && m[1]!.length >= fence.length) fence = null;
      return '';
    }
    if (m !== null) {
      fence = m[1]!;
      return '';
    }
    return l.replace(/(`+)[^`]*?\1/g, (s) => ' '.repeat(s.length));
  });
  return out.join('\n');
}

/** Every inline link and image target (`[text](target)`, `![alt](target "title")`) and reference definition. Pure. */
export function findLinks(markdown: string): MarkdownLink[] {
  const text = stripCode(markdown);
  const links: MarkdownLink[] = [];
  const lineAt = (index: number) => text.slice(0, index).split('\n').length;
  for (const m of text.matchAll(/\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g))
    links.push({ target: m[1]!, line: lineAt(m.index) });
  for (const m of text.matchAll(/^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+"[^"]*")?\s*$/gm))
    links.push({ target: m[1]!, line: lineAt(m.index) });
  return links;
}

/** GitHub's heading anchor: lower case, Markdown marks and punctuation dropped, each space a hyphen. Pure. */
export function slug(heading: string): string {
  return heading
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1') // a link in a heading keeps its text
    .replace(/<[^>]+>/g, '')
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\p{M} _-]/gu, '')
    .replace(/ /g, '-');
}

/** The anchors a Markdown document offers: its headings' slugs (repeats numbered `-1`, `-2`, …) and explicit ids. Pure. */
export function anchorsOf(markdown: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  const lines = stripCodeFencesOnly(markdown).split('\n');
  for (const l of lines) {
    const m = /^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$/.exec(l);
    if (m === null) continue;
    const base = slug(m[1]!.replace(/`/g, ''));
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    anchors.add(n === 0 ? base : `${base}-${n}`);
  }
  for (const m of markdown.matchAll(/<a\s+(?:id|name)="([^"]+)"/g)) anchors.add(m[1]!);
  return anchors;
}

/** The text with fenced code blocks blanked out (inline code kept: headings slug its text). Pure. */
function stripCodeFencesOnly(markdown: string): string {
  let fence: string | null = null;
  return markdown
    .split('\n')
    .map((l) => {
      const m = /^\s{0,3}(`{3,}|~{3,})/.exec(l);
      if (fence !== null) {
        if (m !== null && m[1]![0] === fence[0] && m[1]!.length >= fence.length) fence = null;
        return '';
      }
      if (m !== null) {
        fence = m[1]!;
        return '';
      }
      return l;
    })
    .join('\n');
}

function* markdownFiles(dir: string): Generator<string> {
  for (const entry of readdirSync(dir).sort()) {
    const path = join(dir, entry);
    if (statSync(path).isDirectory()) yield* markdownFiles(path);
    else if (entry.endsWith('.md')) yield path;
  }
}

/** The documents whose links are checked. */
function checkedFiles(): string[] {
  return [README, join(ROOT, 'CONTRIBUTING.md'), ...markdownFiles(DOCS)];
}

const isExternal = (target: string) => /^[a-z][a-z0-9+.-]*:/i.test(target);

/** What is wrong with `link` in `file`, or null when it resolves. */
function checkLink(file: string, link: MarkdownLink): string | null {
  if (isExternal(link.target)) return null;
  const hashAt = link.target.indexOf('#');
  const pathPart = hashAt === -1 ? link.target : link.target.slice(0, hashAt);
  const anchor = hashAt === -1 ? null : decodeURIComponent(link.target.slice(hashAt + 1));
  const path = pathPart === '' ? file : resolve(dirname(file), decodeURIComponent(pathPart));
  const where = `${relative(ROOT, file)}:${link.line}: ${link.target}`;
  if (!path.startsWith(ROOT + sep) && path !== ROOT) return `${where} points outside the repository`;
  if (!existsSync(path)) return `${where}: ${relative(ROOT, path)} does not exist`;
  if (anchor !== null && anchor !== '' && path.endsWith('.md')) {
    if (!anchorsOf(readFileSync(path, 'utf8')).has(anchor))
      return `${where}: no heading or anchor #${anchor} in ${relative(ROOT, path)}`;
  }
  return null;
}

/** The files a Markdown file links to (resolved absolute paths, anchors dropped). */
function linkedFiles(file: string): Set<string> {
  const out = new Set<string>();
  for (const link of findLinks(readFileSync(file, 'utf8'))) {
    if (isExternal(link.target)) continue;
    const pathPart = link.target.split('#')[0]!;
    if (pathPart !== '') out.add(resolve(dirname(file), decodeURIComponent(pathPart)));
  }
  return out;
}

test('README.md is at most 12 KiB', () => {
  const bytes = statSync(README).size;
  assert.ok(
    bytes <= README_MAX_BYTES,
    `README.md is ${bytes} bytes, over ${README_MAX_BYTES}: move reference material to docs/`,
  );
});

test('every relative link in README.md, CONTRIBUTING.md and docs/ resolves, anchors included', () => {
  const problems: string[] = [];
  let checked = 0;
  for (const file of checkedFiles()) {
    for (const link of findLinks(readFileSync(file, 'utf8'))) {
      if (isExternal(link.target)) continue;
      checked++;
      const problem = checkLink(file, link);
      if (problem !== null) problems.push(problem);
    }
  }
  assert.ok(checked > 50, `only ${checked} relative links found: is the link parser broken?`);
  assert.deepEqual(problems, []);
});

test('every page under docs/ is linked from README.md (reference pages: from docs/reference/README.md)', () => {
  const fromReadme = linkedFiles(README);
  const referenceIndex = join(REFERENCE, 'README.md');
  const fromReferenceIndex = existsSync(referenceIndex) ? linkedFiles(referenceIndex) : new Set<string>();
  const missing: string[] = [];
  for (const page of markdownFiles(DOCS)) {
    if (fromReadme.has(page)) continue;
    const inReference = dirname(page) === REFERENCE && page !== referenceIndex;
    if (inReference && fromReadme.has(referenceIndex) && fromReferenceIndex.has(page)) continue;
    missing.push(relative(ROOT, page));
  }
  assert.deepEqual(missing, [], 'docs pages no link from README.md reaches');
});

test('the link checker itself: links, code, anchors and slugs', () => {
  const md = [
    '# Several cores: `--workers`',
    'See [a](docs/a.md#x-y), ![img](pic.png "t") and `[not](a-link.md)`.',
    '```sh',
    '[not](either.md)',
    '```',
    '## Tool calls, reasoning and structured outputs',
    '## Repeat',
    '## Repeat',
    '[ref]: ../CONTRIBUTING.md#tests',
    '<a id="custom"></a>',
  ].join('\n');
  assert.deepEqual(
    findLinks(md).map((l) => [l.target, l.line]),
    [
      ['docs/a.md#x-y', 2],
      ['pic.png', 2],
      ['../CONTRIBUTING.md#tests', 9],
    ],
  );
  const anchors = anchorsOf(md);
  for (const a of [
    'several-cores---workers',
    'tool-calls-reasoning-and-structured-outputs',
    'repeat',
    'repeat-1',
    'custom',
  ]) {
    assert.ok(anchors.has(a), `missing anchor ${a}`);
  }
  assert.equal(slug('`cache_aware` against `load`'.replace(/`/g, '')), 'cache_aware-against-load');
  assert.equal(slug('Quick start: vLLM'), 'quick-start-vllm');
});
