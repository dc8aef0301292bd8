/** Starting a real gateway for end-to-end tests: port 0, silent logs, fast simulated ranks, an `openai` client. */
import OpenAI from 'openai';
import { pino } from 'pino';
import { startGateway, type GatewayOptions, type RunningGateway } from '../../src/gateway.js';

/**
 * `startGateway` with test defaults: any free port, a silent logger, model id `sim`, and simulated ranks that run at
 * time scale 0 with warn-level logs. `opts` overrides any default.
 */
export function startSimGateway(opts: GatewayOptions = {}): Promise<RunningGateway> {
  return startGateway({
    simArgs: ['--time-scale', '0', '--log-level', 'warn'],
    port: 0,
    logger: pino({ level: 'silent' }),
    modelId: 'sim',
    ...opts,
  });
}

/** An `openai` client for `gateway`: no retries, a 60 s request bound. */
export function openaiClient(gateway: RunningGateway): OpenAI {
  return new OpenAI({ baseURL: `${gateway.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60_000 });
}
