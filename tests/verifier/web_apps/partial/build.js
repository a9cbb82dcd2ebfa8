// Copies src/ to dist/ (the build step npm runs; no dependencies).
const fs = require("fs");
fs.mkdirSync("dist", { recursive: true });
for (const name of fs.readdirSync("src")) fs.copyFileSync(`src/${name}`, `dist/${name}`);
