export { startOrchestrator, type Orchestrator } from './orchestrator.js';
export { defaultConfig, type OrchestratorConfig } from './config.js';
export * from './client/index.js';
