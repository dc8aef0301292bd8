/**
 * docs/configuration.md's option tables, generated from the option table (src/serve-options.ts): the page keeps them
 * between `<!-- options:begin -->` and `<!-- options:end -->`. `npm run docs:options` writes them
 * (scripts/write-option-docs.ts); test/cli/options-table.test.ts compares.
 */
import { fileURLToPath } from 'node:url';
import { format, resolveConfig } from 'prettier';
import { renderOptionTables } from '../../src/serve-options.js';

/** The page's path. */
export const CONFIGURATION_PAGE = fileURLToPath(new URL('../../docs/configuration.md', import.meta.url));

export const OPTIONS_BEGIN = '<!-- options:begin -->';
export const OPTIONS_END = '<!-- options:end -->';

/**
 * `page` (the text of docs/configuration.md) with the generated tables between the markers, formatted by prettier
 * with the repository's configuration (.prettierrc.json), as `npm run format` would.
 * @throws Error when the page lacks the markers.
 */
export async function configurationPage(page: string): Promise<string> {
  const a = page.indexOf(OPTIONS_BEGIN);
  const b = page.indexOf(OPTIONS_END);
  if (a < 0 || b < a) throw new Error(`docs/configuration.md has no ${OPTIONS_BEGIN} … ${OPTIONS_END} block`);
  const body = `${page.slice(0, a + OPTIONS_BEGIN.length)}\n\n${renderOptionTables()}\n${page.slice(b)}`;
  const config = (await resolveConfig(CONFIGURATION_PAGE)) ?? {};
  return format(body, { ...config, parser: 'markdown' });
}
