/**
 * Request-schema validators that are compiled when a route first validates, once per process.
 *
 * Why: fastify compiles every route's request schemas with ajv when the app becomes ready. Our chat, completions
 * and Responses schemas are large, and that compile took ~0.2–0.3 CPU-s per app (profiled with `node --cpu-prof` on
 * a gateway start and on a test file that builds one app), paid again by every `--workers` front and every app a
 * process builds, for routes a process may never serve. Here a route's validator is compiled on its first request,
 * and the compiled function is shared by every app of the process that validates the same schema with the same ajv
 * options. Validation of bodies, query strings and path parameters is unchanged: the same `@fastify/ajv-compiler`
 * (fastify's default) with the same options compiles the same schema; only when differs. The first request to a
 * route pays its compile (measured: chat ~120 ms of CPU, the others 8–45 ms; later requests 1–2 ms). Headers schemas
 * are refused (see `lazyValidator`).
 *
 * Sharing is safe because a compiled validator is a pure function of the schema and the ajv options (the pool below
 * keys its ajv instances by the options, the cache by the schema's JSON). Our schemas hold no functions or regular
 * expression objects, so their JSON is the whole schema.
 */
import AjvCompiler from '@fastify/ajv-compiler';

type Options = Parameters<AjvCompiler.BuildCompilerFromPool>[1];
type RouteDefinition = AjvCompiler.RouteDefinition;
type Compiled = ReturnType<ReturnType<AjvCompiler.BuildCompilerFromPool>>;

/** One ajv instance per distinct (external schemas, options) in this process (the library's pool). */
const pool = AjvCompiler();
/**
 * Compiled validators by compiler (one per pool entry), then by the schema's JSON: fastify hands each app its own
 * copy of a route's schema, so the object is not the key. Bounded by the distinct schemas the code declares.
 */
const compiledBy = new WeakMap<object, Map<string, Compiled>>();

/**
 * A lazy validator for `route`: compiled (or taken from the process's cache) on its first call, then called
 * directly. It carries the compiled function's `errors` after each call, which fastify reads on a failed
 * validation, and takes ajv's optional second argument (the parent data, for options that rewrite the root).
 * Throws on the first call what ajv's compile throws (a schema ajv refuses): the route tests send every route a
 * request, so such a schema fails a test, not a user's request. Throws at once (the app does not start) for a
 * headers schema.
 */
function lazyValidator(compile: (route: RouteDefinition) => Compiled, route: RouteDefinition): Compiled {
  if (route.httpPart === 'headers') {
    // fastify lowercases a headers schema's property names only for its default compiler (a custom one gets the
    // schema as written), so the same schema would validate differently here. No route declares one; refuse it.
    throw new Error(
      `${route.method ?? ''} ${route.url ?? ''}: a headers schema is not supported (validator-compiler.ts): check ` +
        'headers in a hook',
    );
  }
  let cache = compiledBy.get(compile);
  if (cache === undefined) compiledBy.set(compile, (cache = new Map()));
  const schemaCache = cache;
  const schema = JSON.stringify(route.schema);
  let fn: Compiled | undefined;
  const validate = ((data: unknown, dataCxt?: unknown) => {
    if (fn === undefined) {
      // Looked up at the first call, not when the app starts: another app may have compiled it since.
      fn = schemaCache.get(schema);
      if (fn === undefined) schemaCache.set(schema, (fn = compile(route)));
    }
    const ok = (fn as (d: unknown, c?: unknown) => unknown)(data, dataCxt);
    validate.errors = fn.errors;
    return ok;
  }) as Compiled;
  // fastify passes the parent data only to a function with `schemaEnv` (an ajv validator); ours forwards it.
  (validate as { schemaEnv?: unknown }).schemaEnv = true;
  return validate;
}

/**
 * fastify's `schemaController.compilersFactory.buildValidator`: for the app's external schemas and ajv options, a
 * schema compiler whose validators compile on first use and are shared across the process's apps.
 */
export const buildLazyValidator: AjvCompiler.BuildCompilerFromPool = (externalSchemas, options?: Options) => {
  const compile = pool(externalSchemas, options);
  return (route) => lazyValidator(compile, route);
};
