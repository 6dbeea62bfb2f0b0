import { Injectable } from '@nestjs/common';
import { setTimeout as sleep } from 'node:timers/promises';
import { Task, type JobContext } from '../libs/job-queue/src';

@Injectable()
export class ExportTasks {
  /** Returns a result: kept with the completed job (24 h by default), and what waitForJob() resolves with. */
  @Task('render_invoice_pdf')
  async render(payload: { invoice: number }) {
    await sleep(200);
    return { invoice: payload.invoice, url: `https://files.example.com/invoices/${payload.invoice}.pdf`, pages: 2 };
  }

  /** A flow's last step: runs once every PDF of the flow is rendered, with their results at hand. */
  @Task('zip_invoices')
  async zip(_payload: unknown, ctx: JobContext) {
    const rendered = await ctx.dependencyResults(); // { pdf1: { state: 'completed', result: { url, … } }, … }
    const urls = Object.values(rendered).map((dependency) => (dependency.result as { url: string }).url);
    return { zip: `https://files.example.com/invoices-${ctx.job.flowId}.zip`, files: urls.length };
  }

  /**
   * A long task that reports progress (stored at most once a second, emitted as job:progress
   * at once) and stops when its signal aborts: a cancel, a timeout or the shutdown.
   */
  @Task('export_orders', { timeout: '5m' })
  async export(payload: { batches: number }, ctx: JobContext) {
    for (let batch = 1; batch <= payload.batches; batch++) {
      await sleep(500, undefined, { signal: ctx.signal });
      ctx.progress(Math.round((batch / payload.batches) * 100));
    }
    return { exported: payload.batches * 1000 };
  }
}
