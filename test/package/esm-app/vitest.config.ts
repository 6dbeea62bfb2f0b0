import { defineConfig } from 'vitest/config';

// As `nest new` (ESM) writes it, less vite-tsconfig-paths: this app has no path aliases.
export default defineConfig({
  test: {
    globals: true,
    root: './',
    include: ['**/*.e2e-spec.ts'],
  },
});
