/**
 * The orchestrator's handle on the load-generator process (./load-generator.ts): fork it once, run phases one after
 * the other, and call back at the instants the measured window opens and closes so the caller can sample the
 * measured process's CPU there.
 */
import { fork, type ChildProcess } from 'node:child_process';
import type { GatewayBuild } from './build.js';
import type { FromLoadGenerator, LoadResult, LoadScenario, ToLoadGenerator } from './protocol.js';

/** Called when the window opens / closes (awaited before the result is returned). */
export interface WindowHooks {
  onWindowStart(): void | Promise<void>;
  onWindowEnd(): void | Promise<void>;
}

/** A forked load generator. */
export class LoadProcess {
  private constructor(private readonly child: ChildProcess) {}

  /** Forks the generator of `build` (compiled, or through tsx) with an IPC channel. */
  static start(build: GatewayBuild): LoadProcess {
    const { path, execArgv } = build.benchScript('load-generator');
    return new LoadProcess(fork(path, [], { execArgv, stdio: ['ignore', 'inherit', 'inherit', 'ipc'] }));
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
