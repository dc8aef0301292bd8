/**
 * Test set-up shared by the router-service tests: a `RouterService` bound on a fresh socket path with two fronts'
 * channels connected to it (front ids 1 and 2). `close()` closes the channels, the service and the directory.
 */
import type { Logger } from 'pino';
import { FrontChannel } from '../../src/fronts/remote-backend.js';
import { RouterService, type RouterServiceOptions } from '../../src/fronts/router-service.js';
import { freshDir } from '../helpers/async.js';

/** What {@link openTwoFronts} returns. */
export interface TwoFronts {
  service: RouterService;
  address: string;
  a: FrontChannel;
  b: FrontChannel;
  close(): Promise<void>;
}

/** Binds `new RouterService(options)` in a fresh directory (`prefix`) and connects fronts 1 and 2. */
export async function openTwoFronts(prefix: string, options: RouterServiceOptions, log: Logger): Promise<TwoFronts> {
  const dir = await freshDir(prefix);
  const service = new RouterService(options);
  const address = `${dir.dir}/fronts.sock`;
  await service.bind(address);
  const a = await FrontChannel.connect(address, 1, service.frontToken, log);
  const b = await FrontChannel.connect(address, 2, service.frontToken, log);
  return {
    service,
    address,
    a,
    b,
    async close() {
      a.close();
      b.close();
      service.close();
      await dir.cleanup();
    },
  };
}
