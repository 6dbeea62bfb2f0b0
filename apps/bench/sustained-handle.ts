import type { BenchConfig } from './config';
import { IpcChild } from './ipc-child';
import type { ProcessCounts, Produced, SustainedMessage, SustainedRole, SustainedSystem } from './sustained-process';

/** The bench's side of one process of the sustained lines (sustained-process.ts). */
export class SustainedProcess {
  private constructor(private readonly child: IpcChild<SustainedMessage>) {}

  /**
   * Forks a producer or a worker of `system` on `url` (whose schema the bench made first), the
   * `index`th of its role; a worker starts at once, and hands its starts to `onStarts` ([startedAt, waitMs, …]).
   */
  static async open(
    url: string,
    config: BenchConfig,
    system: SustainedSystem,
    role: SustainedRole,
    index: number,
    onStarts: (samples: number[]) => void,
  ): Promise<SustainedProcess> {
    const child = IpcChild.fork<SustainedMessage>('sustained-process.js', `${system} ${role} ${index + 1}`, (message) => onStarts(message.samples));
    try {
      await child.call('open', { url, config, system, role, index });
    } catch (error) {
      child.kill();
      throw error;
    }
    return new SustainedProcess(child);
  }

  /** A producer's adds: `rate` a second (null: flat out) for `seconds`. */
  produce(rate: number | null, seconds: number): Promise<Produced> {
    return this.child.call('produce', { rate, seconds }) as Promise<Produced>;
  }

  /** Its counts so far; a worker's samples up to now arrive before this resolves. */
  counts(): Promise<ProcessCounts> {
    return this.child.call('counts') as Promise<ProcessCounts>;
  }

  close(): Promise<void> {
    return this.child.close();
  }
}
