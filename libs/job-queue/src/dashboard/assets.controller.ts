import { Controller, Get, Header } from '@nestjs/common';
import { SCRIPT, STYLES } from './assets';

/** The style sheet and script, unguarded: they hold no data (the pages that use them are guarded). */
@Controller('assets')
export class DashboardAssetsController {
  @Get('dashboard.css')
  @Header('Content-Type', 'text/css; charset=utf-8')
  @Header('Cache-Control', 'public, max-age=3600')
  styles(): string {
    return STYLES;
  }

  @Get('dashboard.js')
  @Header('Content-Type', 'text/javascript; charset=utf-8')
  @Header('Cache-Control', 'public, max-age=3600')
  script(): string {
    return SCRIPT;
  }
}
