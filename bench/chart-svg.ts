/**
 * What the benchmarks' bar charts (bench/routing/chart.ts, bench/throughput/chart.ts) share: text width estimates,
 * label wrapping, the y axis (its top chosen from the bars, so one outlying whisker cannot flatten them), whiskers cut
 * at the axis top with a caret, value labels that cannot collide, and the legend. Pure functions; every coordinate is
 * in SVG user units (px), y growing downwards.
 *
 * Text is laid out from an estimate, not a measurement (no font is at hand when the SVG is written): a character is
 * taken as 0.6 × the font size wide (bold included), more than digits and most lower-case letters take in the common
 * sans-serif fonts (about 0.5–0.56 in Arial's metrics; capitals run wider); a line of text spans 0.8 × the font size
 * above its baseline and 0.2 × below. test/bench/charts.test.ts checks the committed
 * SVGs with the same estimate.
 */

/** Average advance of one character, as a fraction of the font size. */
export const CHAR_WIDTH = 0.6;

/** `s` escaped for SVG text and attribute values. */
export function esc(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
}

/** Estimated width in px of `text` at `fontSize` px: characters × fontSize × `CHAR_WIDTH`. */
export function textWidth(text: string, fontSize: number): number {
  return [...text].length * fontSize * CHAR_WIDTH;
}

/**
 * `text` as lines no wider than `maxWidth` px (estimated, `textWidth`): broken after a space, `_` or `-` (the space
 * dropped, `_` and `-` kept at the line's end), and a word wider than a whole line cut where it fills one. At least
 * one character per line, so a line is wider than `maxWidth` only when one character is.
 */
export function wrapText(text: string, fontSize: number, maxWidth: number): string[] {
  const fits = (s: string): boolean => textWidth(s, fontSize) <= maxWidth;
  // Words with the separator that ends them: 'multi_turn_shared' → ['multi_', 'turn_', 'shared'].
  const words = text.match(/[^ _-]+[_-]*|[_-]+/g) ?? [];
  const spaceAfter = new Set<number>();
  {
    let at = 0;
    words.forEach((w, i) => {
      at = text.indexOf(w, at) + w.length;
      if (text[at] === ' ') spaceAfter.add(i);
    });
  }
  const lines: string[] = [];
  let line = '';
  words.forEach((word, i) => {
    let w = word;
    const joined = line === '' ? w : line + w;
    if (fits(joined)) {
      line = joined;
    } else {
      if (line !== '') lines.push(line.trimEnd());
      // A word wider than a line: cut it into pieces that fill one.
      while (!fits(w) && [...w].length > 1) {
        const chars = [...w];
        let n = 1;
        while (n + 1 < chars.length && fits(chars.slice(0, n + 1).join(''))) n++;
        lines.push(chars.slice(0, n).join(''));
        w = chars.slice(n).join('');
      }
      line = w;
    }
    if (spaceAfter.has(i)) line += ' ';
  });
  if (line.trim() !== '' || lines.length === 0) lines.push(line.trimEnd());
  return lines;
}

/** One bar's values: its height (`median`) and, when it has one, its whisker's top (`high`). */
export interface BarExtent {
  median: number;
  high?: number;
}

/** A y axis from 0 to `top`, ticks every `step`. */
export interface YAxis {
  top: number;
  step: number;
}

/** The steps ticks may take (1, 2.5, 5 per decade): at most 10 ticks from 0 to the top. */
function tickStep(raw: number): number {
  for (let decade = 0.01; ; decade *= 10) {
    for (const m of [1, 2.5, 5]) {
      const step = m * decade;
      if (raw / step <= 10 + 1e-9) return Number(step.toPrecision(3));
    }
  }
}

/**
 * The y axis of `bars`, chosen from the bars and not from the largest whisker: it covers `floor`, 1.1 × the tallest
 * bar, and every whisker top up to `headroom` × the tallest bar; a whisker above that is an outlier, drawn to the axis
 * top with a caret (`whisker`) and its value written by the caller. One seed's outlier (a max over seeds 5× the medians) would
 * otherwise set the scale and flatten every bar. `top` (the caller's cap, e.g. when a bar itself is in the hundreds)
 * replaces the choice; bars above it are cut too. The top is a whole number of ticks.
 */
export function chooseYAxis(bars: readonly BarExtent[], floor: number, headroom = 1.5, top?: number): YAxis {
  if (top !== undefined) {
    if (!(top > 0)) throw new RangeError(`the y axis top must be positive, got ${top}`);
    return { top, step: tickStep(top) };
  }
  const medians = bars.map((b) => b.median).filter((v) => Number.isFinite(v));
  const tallest = Math.max(0, ...medians);
  const highs = bars.map((b) => b.high ?? Number.NaN).filter((h) => Number.isFinite(h) && h <= headroom * tallest);
  const raw = Math.max(floor, 1.1 * tallest, ...highs);
  const step = tickStep(raw);
  return { top: Number((Math.ceil(raw / step - 1e-9) * step).toPrecision(6)), step };
}

/** The tick values of `axis`, 0 to its top. */
export function ticks(axis: YAxis): number[] {
  const n = Math.round(axis.top / axis.step);
  return Array.from({ length: n + 1 }, (_, i) => Number((i * axis.step).toPrecision(6)));
}

/** A tick label: as many decimals as the step needs (0.25 → 2, 2.5 → 1, 5 → 0), at least `minDecimals`. */
export function tickLabel(v: number, axis: YAxis, minDecimals = 0): string {
  const decimals =
    axis.step >= 1 && Number.isInteger(axis.step) ? 0 : axis.step * 10 >= 1 && Number.isInteger(axis.step * 10) ? 1 : 2;
  return v.toFixed(Math.max(decimals, minDecimals));
}

/** An upward caret (a filled triangle, `CARET_H` px tall) whose tip is `CARET_H` px above `y`, centred on `x`. */
export function caret(x: number, y: number): string {
  return `<polygon points="${(x - 4).toFixed(1)},${y.toFixed(1)} ${(x + 4).toFixed(1)},${y.toFixed(1)} ${x.toFixed(1)},${(y - CARET_H).toFixed(1)}" fill="#222"><title>cut at the axis top</title></polygon>`;
}

/** A caret's height in px. */
export const CARET_H = 7;

/**
 * A whisker from `lo` to `hi` at `x` (`y` maps a value to px), with caps `capW` px wide. A whisker above the axis top is drawn to it and ends in a caret instead of a cap; one wholly above is the caret
 * alone. Returns the SVG elements and whether it was cut.
 */
export function whisker(
  x: number,
  lo: number,
  hi: number,
  axis: YAxis,
  y: (v: number) => number,
  capW: number,
): { svg: string[]; cut: boolean } {
  const cut = hi > axis.top;
  const svg: string[] = [];
  const top = y(Math.min(hi, axis.top));
  const bottom = y(Math.min(lo, axis.top));
  if (bottom > top)
    svg.push(
      `<line x1="${x.toFixed(1)}" x2="${x.toFixed(1)}" y1="${bottom.toFixed(1)}" y2="${top.toFixed(1)}" stroke="#222"/>`,
    );
  const cap = (v: number): string =>
    `<line x1="${(x - capW / 2).toFixed(1)}" x2="${(x + capW / 2).toFixed(1)}" y1="${y(v).toFixed(1)}" y2="${y(v).toFixed(1)}" stroke="#222"/>`;
  if (lo <= axis.top) svg.push(cap(lo));
  if (cut) svg.push(caret(x, top));
  else svg.push(cap(hi));
  return { svg, cut };
}

/**
 * A bar's value label: `x` the centre of the bar's column, `bottom` the px of the highest thing drawn in that column
 * (bar top, whisker cap or caret tip), `text` what it says.
 */
export interface ValueLabel {
  x: number;
  bottom: number;
  text: string;
}

/** A white outline drawn under a label's glyphs. */
const HALO = ' stroke="#ffffff" stroke-width="3" stroke-linejoin="round" paint-order="stroke"';

/** Whether labels of `fontSize` px must be turned to fit columns `width` px wide. */
export function labelsTurned(labels: readonly ValueLabel[], fontSize: number, width: number): boolean {
  return labels.some((l) => textWidth(l.text, fontSize) > width);
}

/** How far (px) the labels rise above their `bottom`: the longest label when turned, one line when not. */
export function labelRise(labels: readonly ValueLabel[], fontSize: number, turned: boolean, gap: number): number {
  if (labels.length === 0) return 0;
  return gap + (turned ? Math.max(...labels.map((l) => textWidth(l.text, fontSize))) : fontSize);
}

/**
 * The SVG text elements of `labels`, each standing `gap` px above its `bottom`: written across (centred on `x`) when
 * `turned` is false, which the caller chooses only when every label fits its column (`labelsTurned`); else turned to
 * read upwards, so that along x each is one line's height (the font size) wide, centred on `x`. Either way a label
 * stays inside its bar's column, so labels of different bars cannot collide. A white outline keeps them legible where
 * they cross a grid line or the 1.0 line.
 */
export function valueLabels(labels: readonly ValueLabel[], fontSize: number, turned: boolean, gap: number): string[] {
  return labels.map((l) => {
    const base = l.bottom - gap;
    if (!turned)
      return `<text x="${l.x.toFixed(1)}" y="${(base - 0.2 * fontSize).toFixed(1)}" text-anchor="middle" font-size="${fontSize}"${HALO}>${esc(l.text)}</text>`;
    // Turned -90° about its start: the text runs upwards from `base`; its glyphs span 0.8 × the font size left of
    // the baseline and 0.2 × right of it, so the baseline sits 0.3 × right of the column's centre.
    const x = (l.x + 0.3 * fontSize).toFixed(1);
    const y = base.toFixed(1);
    return `<text x="${x}" y="${y}" font-size="${fontSize}" transform="rotate(-90 ${x} ${y})"${HALO}>${esc(l.text)}</text>`;
  });
}

/** One legend entry: a colour swatch and its label. */
export interface LegendItem {
  label: string;
  color: string;
}

/**
 * The legend laid out in rows from `left` to `right` px, the first row's baseline at `y`, 18 px between rows: each
 * entry a 12 px swatch, its label (12 px font) and 24 px of space. Returns the SVG elements and the last row's
 * baseline.
 */
export function legend(
  items: readonly LegendItem[],
  left: number,
  right: number,
  y: number,
): { svg: string[]; lastY: number } {
  const svg: string[] = [];
  let x = left;
  let row = y;
  for (const item of items) {
    const w = 18 + textWidth(item.label, 12);
    if (x > left && x + w > right) {
      x = left;
      row += 18;
    }
    svg.push(`<rect x="${x.toFixed(1)}" y="${row - 10}" width="12" height="12" fill="${item.color}"/>`);
    svg.push(`<text x="${(x + 18).toFixed(1)}" y="${row}">${esc(item.label)}</text>`);
    x += w + 24;
  }
  return { svg, lastY: row };
}

/**
 * The y axis's title, turned to read upwards and wrapped to `length` px (the plot's height), centred on `centerY`;
 * its first line's glyphs start 8 px from the left edge, each further line 14 px to the right. Returns the SVG elements
 * and the px where its last line ends on the right.
 */
export function yTitle(text: string, centerY: number, length: number): { svg: string[]; right: number } {
  const lines = wrapText(text, 12, length);
  const svg = lines.map((line, i) => {
    const x = 8 + 0.8 * 12 + i * 14;
    return `<text x="${x.toFixed(1)}" y="${centerY.toFixed(1)}" text-anchor="middle" transform="rotate(-90 ${x.toFixed(1)} ${centerY.toFixed(1)})">${esc(line)}</text>`;
  });
  return { svg, right: 8 + 0.8 * 12 + (lines.length - 1) * 14 + 0.2 * 12 };
}

/**
 * The opening of a chart: the `<svg>` element of `width` × `height` px, a white background, the title lines centred
 * at the top, and a grid line with its value label at each tick (`y` maps a value to its pixel row; `left` / `right`:
 * the plot's margins in px). The caller appends the rest and closes the element.
 */
export function chartFrame(
  width: number,
  height: number,
  titleLines: readonly string[],
  tickLabels: readonly { v: number; text: string }[],
  plot: { left: number; right: number; y: (v: number) => number },
): string[] {
  const { left, right, y } = plot;
  const parts = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" font-size="12">`,
    `<rect width="${width}" height="${height}" fill="#ffffff"/>`,
  ];
  titleLines.forEach((line, i) =>
    parts.push(
      `<text x="${width / 2}" y="${24 + 19 * i}" text-anchor="middle" font-size="15" font-weight="bold">${esc(line)}</text>`,
    ),
  );
  for (const t of tickLabels) {
    parts.push(
      `<line x1="${left}" x2="${width - right}" y1="${y(t.v).toFixed(1)}" y2="${y(t.v).toFixed(1)}" stroke="#e6e6e6"/>`,
    );
    parts.push(`<text x="${left - 6}" y="${(y(t.v) + 4).toFixed(1)}" text-anchor="end">${t.text}</text>`);
  }
  return parts;
}
