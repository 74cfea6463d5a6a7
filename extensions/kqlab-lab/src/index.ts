export { MIME_TYPE, renderPayload } from './render';
