import type { Client } from 'pg';
import { connect } from './database';
import { waitFor } from './wait';

/**
 * Records the NOTIFY payloads of one channel. `barrier()` proves that nothing more is on
 * its way: PostgreSQL delivers notifications in commit order, so once a marker sent now has
 * arrived, every notification committed before it has arrived too.
 */
export class NotificationRecorder {
  private received: string[] = [];
  private markers = 0;

  private constructor(
    private readonly client: Client,
    private readonly channel: string,
  ) {}

  static async listen(url: string, channel: string): Promise<NotificationRecorder> {
    const client = await connect(url);
    const recorder = new NotificationRecorder(client, channel);
    client.on('notification', (n) => n.channel === channel && recorder.received.push(n.payload ?? ''));
    await client.query(`listen "${channel}"`);
    return recorder;
  }

  /** Sends a marker and waits for it; returns the payloads received before it since the last barrier. */
  async barrier(): Promise<string[]> {
    const marker = `barrier-${++this.markers}`;
    await this.client.query('select pg_notify($1, $2)', [this.channel, marker]);
    await waitFor(`the notification ${marker}`, () => this.received.includes(marker));
    const before = this.received.slice(0, this.received.indexOf(marker));
    this.received = this.received.slice(this.received.indexOf(marker) + 1);
    return before;
  }

  async end(): Promise<void> {
    await this.client.end();
  }
}
