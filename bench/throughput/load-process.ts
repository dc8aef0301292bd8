/**
 * The orchestrator's handle on the load-generator process (./load-generator.ts): fork it once, run phases one after
 * the other, and call back at the instants the measured window opens and closes so the caller can sample the
 * measured process's CPU there.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { FromLoadGenerator, LoadResult, LoadScenario, ToLoadGenerator } from './protocol.js';

const GENERATOR_PATH = fileURLToPath(new URL('./load-generator.ts', import.meta.url));

/** Called when the window opens / closes (awaited before the result is returned). */
export interface WindowHooks {
  onWindowStart(): void | Promise<void>;
  onWindowEnd(): void | Promise<void>;
}

/** A forked load generator. */
export class LoadProcess {
  private constructor(private readonly child: ChildProcess) {}

  /** Forks the generator (tsx loader) with an IPC channel. */
  static start(): LoadProcess {
    return new LoadProcess(fork(GENERATOR_PATH, [], { execArgv: ['--import', 'tsx'], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] }));
  }

  /** The generator's pid (for its CPU). */
  get pid(): number {
    return this.child.pid!;
  }

  /** Runs one phase. Rejects when the generator fails or exits. */
  run(scenario: LoadScenario, hooks: WindowHooks): Promise<LoadResult> {
    return new Promise<LoadResult>((resolve, reject) => {
      let pending: Promise<void> = Promise.resolve();
      const cleanup = () => {
        this.child.off('message', onMessage);
        this.child.off('exit', onExit);
      };
      const onExit = (code: number | null) => {
        cleanup();
        reject(new Error(`load generator exited (code ${code}) during a phase`));
      };
      const onMessage = (message: FromLoadGenerator) => {
        if (message.type === 'window-start') pending = pending.then(() => hooks.onWindowStart());
        else if (message.type === 'window-end') pending = pending.then(() => hooks.onWindowEnd());
        else if (message.type === 'result') {
          cleanup();
          pending.then(() => resolve(message.result), reject);
        } else {
          cleanup();
          reject(new Error(`load generator failed: ${message.message}`));
        }
      };
      this.child.on('message', onMessage);
      this.child.once('exit', onExit);
      this.child.send({ type: 'run', scenario } satisfies ToLoadGenerator);
    });
  }

  /** Ends the generator. */
  stop(): void {
    this.child.disconnect();
  }
}
