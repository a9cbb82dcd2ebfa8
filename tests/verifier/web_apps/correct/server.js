// Serves this folder's static files with node's http module (no dependencies).
const http = require("http");
const fs = require("fs");
const path = require("path");
const types = { ".html": "text/html", ".js": "text/javascript", ".css": "text/css" };
http
  .createServer((req, res) => {
    const name = req.url === "/" ? "index.html" : path.basename(req.url.split("?")[0]);
    fs.readFile(path.join(__dirname, name), (err, data) => {
      if (err) {
        res.writeHead(404).end("not found");
        return;
      }
      res.writeHead(200, { "Content-Type": types[path.extname(name)] || "application/octet-stream" });
      res.end(data);
    });
  })
  .listen(Number(process.env.PORT), process.env.HOST);
