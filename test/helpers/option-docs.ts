/**
 * docs/configuration.md's option tables, generated from the option table (src/serve-options.ts): the page keeps them
 * between `<!-- options:begin -->` and `<!-- options:end -->`. `npm run docs:options` writes them
 * (scripts/write-option-docs.ts); test/cli/options-table.test.ts compares.
 */
import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { format, type FormatConfig } from 'oxfmt';
import { renderOptionTables } from '../../src/serve-options.js';

/** The page's path. */
export const CONFIGURATION_PAGE = fileURLToPath(new URL('../../docs/configuration.md', import.meta.url));

export const OPTIONS_BEGIN = '<!-- options:begin -->';
export const OPTIONS_END = '<!-- options:end -->';

/** The repository's formatter configuration. */
const FORMATTER_CONFIG = new URL('../../.oxfmtrc.json', import.meta.url);

/**
 * `page` (the text of docs/configuration.md) with the generated tables between the markers, formatted by oxfmt with
 * the repository's configuration (.oxfmtrc.json), as `npm run format` would.
 * @throws Error when the page lacks the markers, or when the formatter reports an error.
 */
export async function configurationPage(page: string): Promise<string> {
  const a = page.indexOf(OPTIONS_BEGIN);
  const b = page.indexOf(OPTIONS_END);
  if (a < 0 || b < a) throw new Error(`docs/configuration.md has no ${OPTIONS_BEGIN} … ${OPTIONS_END} block`);
  const body = `${page.slice(0, a + OPTIONS_BEGIN.length)}\n\n${renderOptionTables()}\n${page.slice(b)}`;
  const result = await format(CONFIGURATION_PAGE, body, await formatterConfig());
  if (result.errors.length > 0) throw new Error(`oxfmt: ${result.errors.map((e) => e.message).join('; ')}`);
  return result.code;
}

/** .oxfmtrc.json's formatting options (its schema and file patterns left out). */
async function formatterConfig(): Promise<FormatConfig> {
  const {
    $schema: _schema,
    ignorePatterns: _ignore,
    ...options
  } = JSON.parse(await readFile(FORMATTER_CONFIG, 'utf8')) as Record<string, unknown>;
  return options as FormatConfig;
}
