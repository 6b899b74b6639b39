// trace-doctor's plotly.js: the core and the trace types its reports draw (scatter is in the core).
var Plotly = require('plotly.js/lib/core');
Plotly.register([require('plotly.js/lib/bar'), require('plotly.js/lib/icicle')]);
module.exports = Plotly;
