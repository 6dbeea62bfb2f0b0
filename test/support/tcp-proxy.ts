/**
 * A TCP proxy between a test app and PostgreSQL that can lose a reply on purpose: once
 * armed, the first server reply that contains `marker` (say, a column name of one
 * statement's result) is swallowed, with everything after it, and the client's connection
 * is cut once the server has said it is ready for the next query, so the statement has
 * committed. The client sees a dead connection; the server did the work. `arm(marker)` picks
 * another statement's reply for the next loss (the chaos run loses claims' and releases').
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

  private markerBytes: Buffer;

  private constructor(private readonly server: Server, readonly port: number, marker: string) {
    this.markerBytes = Buffer.from(marker);
  }

  static async start(target: { host: string; port: number }, marker: string): Promise<LossyProxy> {
    let proxy!: LossyProxy;
    const server = createServer((client) => {
      const upstream = connect(target.port, target.host);
      proxy.sockets.add(client).add(upstream);
      let cutting = false;
      client.on('data', (chunk) => upstream.write(chunk));
      upstream.on('data', (chunk: Buffer) => {
        if (!cutting && chunk.includes(proxy.markerBytes)) {
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
    proxy = new LossyProxy(server, (server.address() as { port: number }).port, marker);
    return proxy;
  }

  /** The next reply with the marker (this one from now on, if given) is lost. */
  arm(marker?: string): void {
    if (marker !== undefined) this.markerBytes = Buffer.from(marker);
    this.armed = true;
  }

  /** No reply is lost until armed again. */
  disarm(): void {
    this.armed = false;
  }

  get isArmed(): boolean {
    return this.armed;
  }

  async stop(): Promise<void> {
    for (const socket of this.sockets) socket.destroy();
    await new Promise((resolve) => this.server.close(resolve));
  }
}
