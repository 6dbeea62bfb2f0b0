/**
 * A TCP proxy between a test app and PostgreSQL that can lose a reply on purpose: once
 * armed, the first server reply that contains `marker` (say, a column name of one
 * statement's result) is swallowed, with everything after it, and the client's connection
 * is cut once the server has said it is ready for the next query, so the statement has
 * committed. The client sees a dead connection; the server did the work.
 */
import { createServer, connect, type Server, type Socket } from 'node:net';

/** ReadyForQuery: 'Z', length 5. */
const READY_FOR_QUERY = Buffer.from([0x5a, 0, 0, 0, 5]);

export class LossyProxy {
  private armed = false;
  /** Server replies that contained the marker, lost or not. */
  seen = 0;
  /** Replies lost so far. */
  lost = 0;
  private readonly sockets = new Set<Socket>();

  private constructor(private readonly server: Server, readonly port: number) {}

  static async start(target: { host: string; port: number }, marker: string): Promise<LossyProxy> {
    const markerBytes = Buffer.from(marker);
    let proxy!: LossyProxy;
    const server = createServer((client) => {
      const upstream = connect(target.port, target.host);
      proxy.sockets.add(client).add(upstream);
      let cutting = false;
      client.on('data', (chunk) => upstream.write(chunk));
      upstream.on('data', (chunk: Buffer) => {
        if (!cutting && chunk.includes(markerBytes)) {
          proxy.seen += 1;
          if (proxy.armed) {
            proxy.armed = false;
            cutting = true;
          }
        }
        if (!cutting) {
          client.write(chunk);
        } else if (chunk.includes(READY_FOR_QUERY)) {
          proxy.lost += 1;
          client.destroy();
          upstream.destroy();
        }
      });
      const close = () => {
        client.destroy();
        upstream.destroy();
      };
      client.on('error', close).on('close', close);
      upstream.on('error', close).on('close', close);
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    proxy = new LossyProxy(server, (server.address() as { port: number }).port);
    return proxy;
  }

  /** The next reply with the marker is lost. */
  arm(): void {
    this.armed = true;
  }

  async stop(): Promise<void> {
    for (const socket of this.sockets) socket.destroy();
    await new Promise((resolve) => this.server.close(resolve));
  }
}
