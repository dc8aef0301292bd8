/**
 * Writes the option tables of docs/configuration.md from the option table (src/serve-options.ts
 * `renderOptionTables`), between the page's `<!-- options:begin -->` and `<!-- options:end -->` markers, formatted by
 * oxfmt as the rest of the repository. Run with `npm run docs:options` after changing an option;
 * test/cli/options-table.test.ts fails while the page is stale.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { CONFIGURATION_PAGE, configurationPage } from '../test/helpers/option-docs.js';

writeFileSync(CONFIGURATION_PAGE, await configurationPage(readFileSync(CONFIGURATION_PAGE, 'utf8')));
process.stderr.write(`wrote the option tables of ${CONFIGURATION_PAGE}\n`);
