import{a as n,b as r}from"./chunk-K6K2U36R.js";var s=globalThis,a=n();s.onmessage=({data:{id:o,events:t}})=>{a.then(e=>s.postMessage({id:o,bad:r(e,t)}),e=>s.postMessage({id:o,error:String(e)}))};
