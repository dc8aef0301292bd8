/**
 * The utility calls a simulated vLLM rank answers (request type `03`, docs/wire/vllm-utility.md): the LoRA methods
 * of vLLM's `EngineCore` (`add_lora`, `remove_lora`, `list_loras`, `pin_lora`). The rank keeps the adapters it was
 * told about (vLLM: its host-memory LoRA cache); the GPU slots are lora-slots.ts's. Like vLLM, an adapter whose
 * path does not exist on this host cannot be added, and any other method fails with the message EngineCore gives
 * for a missing attribute.
 */
import { existsSync } from 'node:fs';
import { WireDecodeError } from '../wire/errors.js';

/** The outcome of one call: a result, or the failure message EngineCore would send. */
export type UtilityOutcome = { result: unknown } | { failure: string };

/** The LoRA adapters a simulated rank knows: int id → name and path. */
export class SimLoraRegistry {
  private readonly adapters = new Map<number, { name: string; path: string }>();

  /** Answer one utility call (see the module comment). Never throws. */
  call(method: string, args: readonly unknown[]): UtilityOutcome {
    try {
      switch (method) {
        case 'add_lora': {
          const req = loraRequestOf(args[0]);
          if (!existsSync(req.path))
            return failed(method, `Loading lora ${req.name} failed: No adapter found for ${req.path}`);
          this.adapters.set(req.id, { name: req.name, path: req.path });
          return { result: true };
        }
        case 'remove_lora': {
          const id = args[0];
          if (typeof id !== 'number') return failed(method, 'lora_id must be an int');
          return { result: this.adapters.delete(id) };
        }
        case 'list_loras':
          return { result: [...this.adapters.keys()] };
        case 'pin_lora':
          return { result: typeof args[0] === 'number' && this.adapters.has(args[0]) };
        default:
          return failed(method, `'EngineCore' object has no attribute '${method}'`);
      }
    } catch (error) {
      return failed(method, error instanceof Error ? error.message : String(error));
    }
  }

  /**
   * Whether a request's adapter can run: one added before, or (vLLM loads it on demand from the request's
   * `lora_path`) one whose path exists; remembered then.
   */
  admit(id: number, name: string, path: string): boolean {
    if (this.adapters.has(id)) return true;
    if (!existsSync(path)) return false;
    this.adapters.set(id, { name, path });
    return true;
  }
}

function failed(method: string, message: string): UtilityOutcome {
  return { failure: `Call to ${method} method failed: ${message}` };
}

/** The fields of a positional `LoRARequest` the sim reads. Throws WireDecodeError for another shape. */
function loraRequestOf(v: unknown): { name: string; id: number; path: string } {
  if (!Array.isArray(v) || v.length < 3) throw new WireDecodeError('add_lora.lora_request', 'expected a LoRARequest');
  const [name, id, path] = v as unknown[];
  if (typeof name !== 'string' || typeof id !== 'number' || typeof path !== 'string')
    throw new WireDecodeError('add_lora.lora_request', 'expected [lora_name, lora_int_id, lora_path, ...]');
  return { name, id, path };
}
