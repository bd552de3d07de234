// A plain node:http server in front of Web-standard handlers (Request -> Response), which is
// what `serve` from "@upstash/workflow" returns. The Python side (pytest_qstash.server.NodeApp)
// binds the listening socket and passes its descriptor as the first argument, so there is no
// race for a port; the process ends when its parent does.
import http from "node:http";

/** Turn a node:http request into a Web Request, with the URL the caller used. */
async function toRequest(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  const body = Buffer.concat(chunks);
  const headers = new Headers();
  for (const [name, value] of Object.entries(req.headers)) {
    for (const item of Array.isArray(value) ? value : [value]) headers.append(name, item);
  }
  const url = `http://${req.headers.host ?? "127.0.0.1"}${req.url}`;
  const hasBody = !["GET", "HEAD"].includes(req.method) && body.length > 0;
  return new Request(url, { method: req.method, headers, body: hasBody ? body : undefined });
}

async function send(res, response) {
  const headers = {};
  response.headers.forEach((value, name) => {
    headers[name] = value;
  });
  res.writeHead(response.status, headers);
  res.end(Buffer.from(await response.arrayBuffer()));
}

/**
 * Serve `routes` ({"/path": async (request) => Response}) on the socket the parent passed
 * (argv[2], a file descriptor) or on `PORT` (default: any free port, printed).
 */
export function listen(routes) {
  const server = http.createServer(async (req, res) => {
    const path = (req.url ?? "/").split("?")[0];
    const route = routes[path];
    try {
      if (route === undefined) {
        await send(res, Response.json({ error: `no route ${path}` }, { status: 404 }));
        return;
      }
      await send(res, await route(await toRequest(req)));
    } catch (error) {
      console.error(error);
      await send(res, Response.json({ error: String(error?.stack ?? error) }, { status: 500 }));
    }
  });
  const fd = process.argv[2];
  server.listen(fd !== undefined ? { fd: Number(fd) } : { host: "127.0.0.1", port: Number(process.env.PORT ?? 0) }, () => {
    const { port } = server.address() ?? {};
    if (fd === undefined) console.log(`listening on http://127.0.0.1:${port}`);
  });
  // Never outlive the test process, however it ends.
  const parent = process.ppid;
  setInterval(() => {
    if (process.ppid !== parent) process.exit(0);
  }, 500).unref();
  return server;
}

/** A JSON answer. */
export const json = (value, status = 200) => Response.json(value, { status });
