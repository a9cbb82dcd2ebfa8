mkdir -p dist
cp src/index.html src/app.js dist/
