import { ConfigurableModuleBuilder } from '@nestjs/common';
import type { JobQueueModuleOptions } from './core/options';

export const {
  ConfigurableModuleClass: ConfigurableJobQueueModule,
  MODULE_OPTIONS_TOKEN: JOB_QUEUE_MODULE_OPTIONS,
  OPTIONS_TYPE: JOB_QUEUE_OPTIONS_TYPE,
  ASYNC_OPTIONS_TYPE: JOB_QUEUE_ASYNC_OPTIONS_TYPE,
} = new ConfigurableModuleBuilder<JobQueueModuleOptions>()
  .setClassMethodName('forRoot')
  .setExtras({ isGlobal: true }, (definition, extras) => ({ ...definition, global: extras.isGlobal }))
  .build();
