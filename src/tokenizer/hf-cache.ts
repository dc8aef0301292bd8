/**
 * `--tokenizer` as a Hugging Face model id, resolved offline from the local Hugging Face cache (issue #13 part 5),
 * the way `huggingface_hub` (and so transformers and vLLM) finds a cached snapshot without the network:
 * - the hub cache folder is `$HF_HUB_CACHE`, else `$HUGGINGFACE_HUB_CACHE` (its legacy name), else `$HF_HOME/hub`,
 *   else `$XDG_CACHE_HOME/huggingface/hub`, else `~/.cache/huggingface/hub` (huggingface_hub `constants.py`);
 * - a model `ORG/NAME` lives in `<hub>/models--ORG--NAME/` (`/` becomes `--`); its revision `main` (or the
 *   `@REVISION` given after the id) names a commit in `refs/<revision>`, whose files are in `snapshots/<commit>/`;
 *   a revision that is itself a 40-hex commit id is looked up in `snapshots/` directly.
 * Nothing is downloaded: a model that is not cached is an error that names every path tried.
 */
import { existsSync, readFileSync, statSync } from 'node:fs';
import { homedir } from 'node:os';
import { isAbsolute, join, resolve } from 'node:path';
import { TokenizerLoadError } from './errors.js';

/** The environment and folders the resolution reads (injectable for tests). */
export interface HfCacheEnv {
  env: Readonly<Record<string, string | undefined>>;
  cwd: string;
  home: string;
}

/** How `--tokenizer` was resolved: `dir` is the folder to load; `hfId` the model id when it came from the cache. */
export interface ResolvedTokenizer {
  dir: string;
  hfId: string | null;
  revision: string | null;
}

/** A Hugging Face model id (`NAME` or `ORG/NAME`, optional `@REVISION`), as huggingface_hub validates repo ids. */
const HF_ID = /^(?:[A-Za-z0-9][A-Za-z0-9._-]*\/)?[A-Za-z0-9][A-Za-z0-9._-]*(?:@[A-Za-z0-9._/-]+)?$/;

/** The hub cache folder for `env` (see the module comment). */
export function hubCacheDir(e: HfCacheEnv): string {
  const { env } = e;
  if (env.HF_HUB_CACHE) return env.HF_HUB_CACHE;
  if (env.HUGGINGFACE_HUB_CACHE) return env.HUGGINGFACE_HUB_CACHE;
  if (env.HF_HOME) return join(env.HF_HOME, 'hub');
  if (env.XDG_CACHE_HOME) return join(env.XDG_CACHE_HOME, 'huggingface', 'hub');
  return join(e.home, '.cache', 'huggingface', 'hub');
}

function isDirectory(path: string): boolean {
  try {
    return statSync(path).isDirectory();
  } catch {
    return false;
  }
}

/** Whether `spec` could be a Hugging Face model id rather than a path (no leading `.`, `/` or `~`, one `/` at most). */
export function looksLikeHfId(spec: string): boolean {
  return !isAbsolute(spec) && !spec.startsWith('.') && !spec.startsWith('~') && HF_ID.test(spec);
}

/**
 * Resolve `--tokenizer SPEC`: an existing folder (relative to `cwd`) is used as it is; otherwise a spec that looks
 * like a Hugging Face id is looked up in the hub cache. Throws `TokenizerLoadError` naming every path tried when
 * neither exists (the message says how to fetch the model; nothing is downloaded).
 */
export function resolveTokenizerSpec(spec: string, e: HfCacheEnv = defaultHfCacheEnv()): ResolvedTokenizer {
  const asPath = resolve(e.cwd, spec);
  if (isDirectory(asPath) || !looksLikeHfId(spec)) return { dir: asPath, hfId: null, revision: null };
  const at = spec.indexOf('@');
  const id = at === -1 ? spec : spec.slice(0, at);
  const revision = at === -1 ? 'main' : spec.slice(at + 1);
  const hub = hubCacheDir(e);
  const repoDir = join(hub, `models--${id.replaceAll('/', '--')}`);
  const tried = [`${asPath} (no such folder)`];
  let commit: string | null = null;
  if (/^[0-9a-f]{40}$/.test(revision)) {
    commit = revision;
  } else {
    const ref = join(repoDir, 'refs', revision);
    if (existsSync(ref)) commit = readFileSync(ref, 'utf8').trim();
    else tried.push(`${ref} (missing)`);
  }
  if (commit !== null) {
    const snapshot = join(repoDir, 'snapshots', commit);
    if (isDirectory(snapshot)) return { dir: snapshot, hfId: id, revision };
    tried.push(`${snapshot} (missing)`);
  }
  throw new TokenizerLoadError(
    `--tokenizer ${spec} is neither a folder nor a Hugging Face model in the local cache; tried ${tried.join(', ')}. ` +
      `Download it first (huggingface-cli download ${id}), point HF_HUB_CACHE or HF_HOME at the cache that has it, or pass a folder`,
    asPath,
  );
}

/** The process's environment, working folder and home folder. */
export function defaultHfCacheEnv(): HfCacheEnv {
  return { env: process.env, cwd: process.cwd(), home: homedir() };
}
