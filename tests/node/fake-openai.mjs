// A fake OpenAI: chat completions answer "Paris", GET / lists what came (socket fd: argv[2]).
import http from "node:http";
const calls = [];
const completion = {
  id: "chatcmpl-1", object: "chat.completion",
  choices: [{ index: 0, finish_reason: "stop", message: { role: "assistant", content: "Paris" } }],
};
http
  .createServer(async (req, res) => {
    let body = "";
    for await (const chunk of req) body += chunk;
    const post = req.method === "POST";
    if (post) calls.push({ path: req.url, auth: req.headers.authorization, body: JSON.parse(body) });
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify(post ? completion : calls));
  })
  .listen({ fd: Number(process.argv[2]) });
const parent = process.ppid; // gone with the test run, however it ends
setInterval(() => process.ppid !== parent && process.exit(0), 500).unref();
