// A database of the consumer check's own on the server at DATABASE_URL (fresh tables, and no
// clash with the tests'), made and dropped with the repository's pg.
// Usage: node database.cjs create <name>   (prints its URL)  |  node database.cjs drop <name>
const { Client } = require('pg');

async function main([command, name]) {
  if (!/^[a-z_][a-z0-9_]*$/.test(name ?? '')) throw new Error(`bad database name ${name}`);
  const client = new Client({ connectionString: process.env.DATABASE_URL });
  await client.connect();
  try {
    if (command === 'create') {
      await client.query(`create database ${name}`);
      const url = new URL(process.env.DATABASE_URL);
      url.pathname = `/${name}`;
      console.log(url.href);
    } else if (command === 'drop') {
      await client.query(`drop database if exists ${name} with (force)`);
    } else {
      throw new Error(`unknown command ${command}`);
    }
  } finally {
    await client.end();
  }
}

main(process.argv.slice(2)).catch((error) => {
  console.error(`database.cjs: ${error.message}`);
  process.exit(1);
});
