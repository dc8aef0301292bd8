/**
 * Cheap stream-chunk JSON (issue 9, the per-token path): most chunks of a stream differ only in one string, the
 * delta's text. `jsonWithSlot` serializes a chunk once with a placeholder in that string's place and keeps the text
 * before and after it; filling it is then `prefix + JSON.stringify(text) + suffix`, which is byte for byte what
 * `JSON.stringify` of the whole chunk gives (the placeholder is a string at the same position, and a string's JSON does
 * not depend on its surroundings). Pure.
 */

/** The placeholder: a string no chunk contains (a NUL makes it impossible in generated text and ids). */
const SLOT = '\u0000model-gateway-slot\u0000';
const SLOT_JSON = JSON.stringify(SLOT);

/**
 * A serializer for the JSON of `build(text)`, where `build` puts its argument in exactly one string position and
 * depends on it in no other way. Returns `fill(text)` ≡ `lead + JSON.stringify(build(text)) + trail` (`lead` and
 * `trail` default to '': a caller that wraps the JSON, e.g. in an SSE record, gets the whole record in one step).
 * @throws Error when `build`'s JSON does not hold the placeholder exactly once (it dropped, copied or transformed it).
 */
export function jsonWithSlot(build: (text: string) => unknown, lead = '', trail = ''): (text: string) => string {
  const json = JSON.stringify(build(SLOT));
  const at = json.indexOf(SLOT_JSON);
  if (at < 0 || json.indexOf(SLOT_JSON, at + 1) >= 0)
    throw new Error('jsonWithSlot: the built value must hold its text exactly once, as a string');
  const prefix = lead + json.slice(0, at);
  const suffix = json.slice(at + SLOT_JSON.length) + trail;
  return (text) => prefix + JSON.stringify(text) + suffix;
}
