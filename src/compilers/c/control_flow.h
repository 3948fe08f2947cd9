// Control flow for the C generator. An If whose condition is known at build time (a
// constant, or computed from shapes the build binds) becomes the branch it takes
// (passes::inline_constant_ifs, in graph_prep's fold rounds). Every other If, Loop and
// Scan compiles each body as a library of its own inside the model's source (generate_c
// with CodegenOptions::nested: its own arena plan, free dims where its shapes vary, its
// weights a blob inside the model's), one instance of it in the model's instance; the
// node's code binds the body's inputs (its formal inputs and the outer values it reads),
// runs it, and keeps its outputs: the taken branch's, a loop's carried values between
// iterations, scan outputs stacked. The emitter is emit_control_flow_op (codegen_context.h).
#pragma once
