import { TypeOrmModule } from '@nestjs/typeorm';

/**
 * The TypeORM module of a test's child-process app (worker-process.ts, test/chaos/): DATABASE_URL,
 * no retry at boot (a failed start is the test's to see), the pool's connections named
 * `applicationName` in pg_stat_activity, a pool of 20.
 */
export function processTypeOrm(applicationName: string) {
  return TypeOrmModule.forRoot({
    type: 'postgres',
    url: process.env.DATABASE_URL,
    retryAttempts: 0,
    extra: { application_name: applicationName, max: 20 },
  });
}
