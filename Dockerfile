# model-gateway container image (docs/operations.md "Build and container image"). Two stages: `build` compiles the TypeScript sources to
# dist/ with every dependency installed; the runtime stage has only the production dependencies, the compiled code,
# the executable and the dashboard's static files, and runs as the unprivileged `node` user of the base image.
#   docker build -t model-gateway .
#   docker run --rm -p 30000:30000 model-gateway                 # 4 simulated ranks
FROM node:24-slim AS build
WORKDIR /app
COPY package.json package-lock.json .npmrc ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
RUN npm run build

FROM node:24-slim AS runtime
# Every serve option is also a MODEL_GATEWAY_* variable (flag > environment > --config file): listen on every
# interface inside the container, JSON logs for the container runtime.
ENV NODE_ENV=production \
    MODEL_GATEWAY_HOST=0.0.0.0 \
    MODEL_GATEWAY_PORT=30000 \
    MODEL_GATEWAY_LOG_FORMAT=json
WORKDIR /app
COPY package.json package-lock.json .npmrc ./
RUN npm ci --omit=dev --no-audit --no-fund && npm cache clean --force
COPY --from=build /app/dist ./dist
COPY bin ./bin
COPY dashboard ./dashboard
USER node
EXPOSE 30000
# Ready = an engine group can serve and the gateway is not draining (GET /ready, see "Kubernetes probes" in docs/operations.md);
# set the port with MODEL_GATEWAY_PORT.
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:' + (process.env.MODEL_GATEWAY_PORT || 30000) + '/ready').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
ENTRYPOINT ["node", "dist/cli.js"]
CMD ["serve"]
