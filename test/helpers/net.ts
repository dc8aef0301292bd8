/** Network fixtures shared by the socket tests. */
import { createServer } from 'node:net';

/**
 * A tcp port on 127.0.0.1 that was free a moment ago (listen on port 0, read it, close). Another process may take
 * it before the caller binds it. Rejects with the listen error, or `no port` if the address is not a tcp one.
 */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      if (address === null || typeof address === 'string') {
        server.close();
        reject(new Error('no port'));
        return;
      }
      server.close(() => resolve(address.port));
    });
  });
}
