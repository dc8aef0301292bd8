/**
 * `tsc --noEmit` and `eslint .` in one process, on one TypeScript program (`npm test`'s static phase, issue 27).
 *
 * Why: run apart, each built its own program of the ~1,800 files tsconfig.json reaches and type-checked what it
 * needed (tsc ~24 CPU-s, eslint ~50 CPU-s on the 2-core dev box). Here the program is built and checked once; eslint's
 * type-aware rules then read types from that program's checker (typescript-eslint's `parserOptions.programs`), whose
 * answers are already computed. The checks are the same: tsc's diagnostics for tsconfig.json, and every rule of
 * eslint.config.js for every file it lints.
 *
 *   node scripts/typecheck-lint.mjs
 *
 * Prints tsc's diagnostics, then eslint's report (stylish); exits 1 when either found an error, 2 when tsconfig.json
 * cannot be read.
 */
import { ESLint } from 'eslint';
import ts from 'typescript';

const root = process.cwd();

const host = {
  getCanonicalFileName: (f) => f,
  getCurrentDirectory: () => root,
  getNewLine: () => '\n',
};

const parsed = ts.getParsedCommandLineOfConfigFile(`${root}/tsconfig.json`, undefined, {
  ...ts.sys,
  onUnRecoverableConfigFileDiagnostic: (d) => {
    process.stderr.write(ts.formatDiagnostic(d, host));
    process.exit(2);
  },
});
if (parsed === undefined) process.exit(2);
if (parsed.errors.length > 0) {
  process.stderr.write(ts.formatDiagnostics(parsed.errors, host));
  process.exit(2);
}

const program = ts.createProgram({
  rootNames: parsed.fileNames,
  options: parsed.options,
  projectReferences: parsed.projectReferences,
});
const diagnostics = ts.getPreEmitDiagnostics(program);
if (diagnostics.length > 0) process.stdout.write(ts.formatDiagnosticsWithColorAndContext(diagnostics, host));
const typeErrors = diagnostics.filter((d) => d.category === ts.DiagnosticCategory.Error).length;

// Only for the TypeScript files (the ones eslint.config.js lints with type information): the program replaces the
// project service, which would build a second program.
const eslint = new ESLint({
  cwd: root,
  overrideConfig: [
    { files: ['**/*.ts'], languageOptions: { parserOptions: { projectService: false, programs: [program] } } },
  ],
});
const results = await eslint.lintFiles(['.']);
const report = await (await eslint.loadFormatter('stylish')).format(results);
if (report !== '') process.stdout.write(report);
// errorCount includes the fatal (parse) errors.
const lintErrors = results.reduce((n, r) => n + r.errorCount, 0);

process.stdout.write(`tsc: ${typeErrors} error(s); eslint: ${lintErrors} error(s) in ${results.length} files\n`);
process.exit(typeErrors > 0 || lintErrors > 0 ? 1 : 0);
